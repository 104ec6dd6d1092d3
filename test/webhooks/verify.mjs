// Verifies every captured webhook delivery with the standardwebhooks package, an implementation independent of
// gatewayd's signer. Input (argv[2]): a JSON file {secret, deliveries: [{headers, body}]}. Prints one line per
// delivery and exits 1 on the first failure.
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";

const { secret, deliveries } = JSON.parse(readFileSync(process.argv[2], "utf8"));
// The library takes the base64 part of a "whsec_" secret.
const wh = new Webhook(secret.replace(/^whsec_/, ""));
let ok = 0;
for (const d of deliveries) {
  try {
    const payload = wh.verify(d.body, d.headers);
    if (!payload.request_id) throw new Error("payload without request_id");
    ok++;
  } catch (e) {
    console.error(`FAIL ${d.headers["webhook-id"]}: ${e.message}`);
    process.exit(1);
  }
}
console.log(`verified ${ok} deliveries`);
