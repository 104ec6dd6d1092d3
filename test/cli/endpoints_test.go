package cli

import (
	"strings"
	"testing"
)

// TestEndpoints: apply creates an endpoint of two targets from the REST shape, then patches the one of its slug;
// list counts its targets, get shows them with their prices; refusals name the field and the rule (a negative
// price among them); delete removes it.
func TestEndpoints(t *testing.T) {
	admin := as(t, adminKey)
	const two = `slug: cli/llama
targets:
- {name: vllm-a, provider: OPENAI, base_url: "http://127.0.0.1:9/v1", target_model: llama, weight: 3, pricing: {input_per_million_tokens: "0.60", output_per_million_tokens: "0.80"}}
- {provider: OPENAI, base_url: "http://127.0.0.1:10/v1", priority: 1}
retry: {attempts: 1, on_status: [503]}
cooldown: {failures: 2, duration_ms: 5000}
`
	created := admin.json("endpoints", "apply", "-f", writeFile(t, "ep.yaml", two))
	id, _ := created["id"].(string)
	if !strings.HasPrefix(id, "ep-") || len(created["targets"].([]any)) != 2 || lookup(created, "cooldown", "duration_ms") != 5000.0 {
		t.Fatalf("apply (create): %v", created)
	}
	r := admin.ok("endpoints", "list")
	row := lineWith(r.stdout, "cli/llama")
	if !strings.Contains(r.stdout, "TARGETS") || !strings.Contains(row, id) || !strings.Contains(row, " 2 ") || !strings.Contains(row, "http://127.0.0.1:9/v1") {
		t.Fatalf("list: %v", r)
	}

	updated := admin.json("endpoints", "apply", "-f", writeFile(t, "ep2.yaml", strings.Replace(two, "weight: 3", "weight: 5", 1)))
	if first, _ := updated["targets"].([]any)[0].(map[string]any); updated["id"] != id || first["weight"] != 5.0 {
		t.Fatalf("apply of the same slug did not patch %s: %v", id, updated)
	}
	r = admin.ok("endpoints", "get", id)
	for _, want := range []string{"WEIGHT", "PRIORITY", "vllm-a", "target-1", "http://127.0.0.1:10/v1", "INPUT $/1M", "OUTPUT $/1M", " 0.60 ", " 0.80"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("get lacks %q: %v", want, r)
		}
	}

	admin.refused(exitInvalid, []string{"HTTP 400", "targets[1].weight", "from 1 to 1000"}, "endpoints", "apply", "-f",
		writeFile(t, "bad.yaml", strings.Replace(two, "priority: 1", "priority: 1, weight: 0", 1)))
	admin.refused(exitInvalid, []string{"HTTP 400", "targets[0].provider", "must be one of OPENAI"}, "endpoints", "apply", "-f",
		writeFile(t, "cohere.yaml", "slug: cli/cohere\ntargets: [{provider: COHERE, base_url: \"https://127.0.0.1:11/v1\"}]\n"))
	admin.refused(exitInvalid, []string{"HTTP 400", "targets[0].pricing.output_per_million_tokens", "non-negative"}, "endpoints", "apply", "-f",
		writeFile(t, "price.yaml", strings.Replace(two, `"0.80"`, `"-0.80"`, 1)))
	admin.refused(exitUsage, []string{"has no slug"}, "endpoints", "apply", "-f", writeFile(t, "noslug.yaml", "targets: []\n"))
	admin.refused(exitUsage, []string{"needs -f"}, "endpoints", "apply")

	if r := admin.ok("endpoints", "delete", id); !strings.Contains(r.stdout, "Deleted endpoint "+id) {
		t.Fatalf("delete: %v", r)
	}
	admin.refused(exitNotFound, nil, "endpoints", "get", id)
}

// lineWith is the first line of out that holds s, or "".
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
