import assert from "node:assert/strict";
import { test } from "node:test";
import { CLIENT_KEYS, SERVER_KEYS, sanitizeSection, serverSettings } from "../../src/settings";
import { packageJson } from "./helpers";

const reader = (values: Record<string, unknown>) => ({
  get: <T>(key: string): T | undefined => values[key] as T | undefined,
});

test("defaults map to the server's defaults", () => {
  assert.deepEqual(serverSettings(reader({}), true), {
    enable: true,
    select: ["DDP"],
    ignore: [],
    severity: {},
    rankGuardNames: [],
    assumeDistributed: false,
    exclude: [],
    project: true,
    preflight: { python: null },
    rankView: { hints: "all", semanticTokens: false },
  });
});

test("every analysis setting is passed through under the server's key", () => {
  const s = serverSettings(
    reader({
      enable: false,
      select: ["DDP2"],
      ignore: ["DDP201"],
      severity: { DDP502: "hint" },
      rankGuardNames: ["is_leader"],
      assumeDistributed: true,
      exclude: ["legacy/**"],
      project: false,
      "preflight.python": "/opt/train/bin/python",
      "rankView.hints": "collectives",
      "rankView.semanticTokens": true,
      interpreter: "/usr/bin/python3",
      "trace.server": "verbose",
    }),
    true,
  );
  assert.equal(s.enable, false);
  assert.deepEqual(s.select, ["DDP2"]);
  assert.deepEqual(s.ignore, ["DDP201"]);
  assert.deepEqual(s.severity, { DDP502: "hint" });
  assert.deepEqual(s.rankGuardNames, ["is_leader"]);
  assert.equal(s.assumeDistributed, true);
  assert.deepEqual(s.exclude, ["legacy/**"]);
  assert.equal(s.project, false);
  assert.deepEqual(s.preflight, { python: "/opt/train/bin/python" });
  assert.deepEqual(s.rankView, { hints: "collectives", semanticTokens: true });
  // Client-only keys never reach the server.
  assert.equal("interpreter" in s, false);
  assert.equal("trace" in s, false);
});

test("an untrusted workspace never sends the preflight interpreter", () => {
  const s = serverSettings(reader({ "preflight.python": "/evil/python" }), false);
  assert.deepEqual(s.preflight, { python: null });
});

test("an invalid value is passed on for the server to report, not silently fixed", () => {
  const s = serverSettings(reader({ select: 42 }), true);
  assert.deepEqual(s.select, ["DDP"]);
  const one = serverSettings(reader({ ignore: "DDP201" }), true);
  assert.deepEqual(one.ignore, ["DDP201"]);
});

test("a raw workspace/configuration answer is mapped and trust-filtered", () => {
  const raw = {
    enable: true,
    select: ["DDP"],
    ignore: ["DDP5"],
    severity: { DDP201: "warning" },
    rankGuardNames: [],
    assumeDistributed: false,
    exclude: [],
    interpreter: "/x/python",
    preflight: { python: "/x/python" },
    trace: { server: "off" },
  };
  const trusted = sanitizeSection(raw, true) as Record<string, unknown>;
  assert.deepEqual(trusted.ignore, ["DDP5"]);
  assert.deepEqual(trusted.severity, { DDP201: "warning" });
  assert.deepEqual(trusted.preflight, { python: "/x/python" });
  assert.equal("interpreter" in trusted, false);
  const untrusted = sanitizeSection(raw, false) as Record<string, unknown>;
  assert.deepEqual(untrusted.preflight, { python: null });
  assert.equal(sanitizeSection(null, true), null);
});

test("package.json contributes exactly the settings the client maps", () => {
  const contributed = Object.keys(packageJson().contributes.configuration.properties).map((k) =>
    k.replace(/^ddp-lsp\./, ""),
  );
  assert.deepEqual([...contributed].sort(), [...SERVER_KEYS, ...CLIENT_KEYS].sort());
  // And the mapping's output covers every server key (nested ones by their first part).
  const out = Object.keys(serverSettings(reader({}), true)).sort();
  assert.deepEqual(out, [...new Set(SERVER_KEYS.map((k) => k.split(".")[0]))].sort());
});

test("contributed defaults are what the mapping assumes when a key is unset", () => {
  const props = packageJson().contributes.configuration.properties;
  const defaults: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(props)) {
    defaults[k.replace(/^ddp-lsp\./, "")] = v.default;
  }
  const fromDefaults = serverSettings(reader(defaults), true);
  assert.deepEqual(fromDefaults, serverSettings(reader({}), true));
});

test("the preflight and interpreter settings are restricted in untrusted workspaces", () => {
  const pkg = packageJson();
  assert.equal(pkg.capabilities.untrustedWorkspaces.supported, "limited");
  assert.deepEqual(
    [...pkg.capabilities.untrustedWorkspaces.restrictedConfigurations].sort(),
    ["ddp-lsp.interpreter", "ddp-lsp.preflight.python"],
  );
});

test("@types/vscode is pinned to engines.vscode (vsce refuses otherwise)", () => {
  const pkg = packageJson();
  assert.equal(`^${pkg.devDependencies["@types/vscode"]}`, pkg.engines.vscode);
});
