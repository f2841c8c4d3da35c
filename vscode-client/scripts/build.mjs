// Bundles the extension (dist/extension.js) or, with --tests, the test files (out/test/*.js).
//
// Tests are bundled with `vscode` aliased to a stub: the real module only exists inside VS Code,
// and node's test runner runs the bundles directly.
import * as esbuild from "esbuild";
import { readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = new Set(process.argv.slice(2));
const production = args.has("--production");

const common = {
  bundle: true,
  platform: "node",
  target: "node18",
  format: "cjs",
  logLevel: "warning",
  absWorkingDir: root,
};

if (args.has("--tests")) {
  const entries = [];
  for (const dir of ["test/unit", "test/e2e"]) {
    for (const name of readdirSync(join(root, dir))) {
      if (name.endsWith(".test.ts")) {
        entries.push(join(dir, name));
      }
    }
  }
  rmSync(join(root, "out"), { recursive: true, force: true });
  await esbuild.build({
    ...common,
    entryPoints: entries,
    outdir: "out/test",
    outbase: "test",
    sourcemap: "inline",
    alias: { vscode: "./test/vscode-stub.ts" },
    // esbuild finds its native binary relative to its own files: load it from node_modules.
    external: ["esbuild"],
  });
} else {
  await esbuild.build({
    ...common,
    entryPoints: ["src/extension.ts"],
    outfile: "dist/extension.js",
    external: ["vscode"],
    minify: production,
    sourcemap: !production,
  });
}
