import { defineConfig } from "vitest/config";

// The built files go to ../dist, which gatewayd embeds (go:embed) and serves at /dashboard/. No inline script or
// style is emitted, so the strict Content-Security-Policy of gatewayd/dashboard holds.
export default defineConfig({
  base: "/dashboard/",
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "../dist",
    emptyOutDir: true,
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: false,
    reportCompressedSize: true,
  },
  test: { include: ["src/**/*.test.ts"] },
});
