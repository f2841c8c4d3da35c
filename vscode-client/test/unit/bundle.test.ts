/**
 * The shipped bundle loads: esbuild packs vscode-languageclient and our modules into one file
 * whose top-level code runs at activation. A bundling mistake (a missing module, a dependency
 * that needs a file beside it) shows up here rather than as "activation failed" in VS Code.
 *
 * vscode-languageclient touches dozens of vscode classes at import time, so `vscode` is a
 * permissive proxy here, not the behavioural stub the other tests use.
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import Module from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { buildSync } from "esbuild";
import { PACKAGE_DIR, packageJson } from "./helpers";

function permissive(): unknown {
  const target = function () {} as unknown as object;
  const proxy: unknown = new Proxy(target, {
    get: (_t, key) => (key === "prototype" ? {} : key === Symbol.toPrimitive ? () => "" : proxy),
    apply: () => proxy,
    construct: () => proxy as object,
  });
  return proxy;
}

test("the production bundle loads and exports activate/deactivate", () => {
  const dir = mkdtempSync(join(tmpdir(), "ddp-lsp-bundle-"));
  try {
    const outfile = join(dir, "extension.js");
    buildSync({
      absWorkingDir: PACKAGE_DIR,
      entryPoints: ["src/extension.ts"],
      bundle: true,
      platform: "node",
      format: "cjs",
      external: ["vscode"],
      minify: true,
      outfile,
      logLevel: "silent",
    });
    const loader = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
    const original = loader._load;
    loader._load = (request: string, ...rest: unknown[]) =>
      request === "vscode" ? permissive() : original(request, ...rest);
    try {
      const ext = Module.createRequire(outfile)(outfile) as Record<string, unknown>;
      assert.equal(typeof ext.activate, "function");
      assert.equal(typeof ext.deactivate, "function");
    } finally {
      loader._load = original;
    }
    assert.equal(packageJson().main, "./dist/extension.js");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
