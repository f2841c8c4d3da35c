import assert from "node:assert/strict";
import { test } from "node:test";
import { UNTRUSTED_PREFLIGHT, filterLenses, guardCommand, mapConfiguration } from "../../src/middleware";

function deps(trusted: boolean) {
  const warned: string[] = [];
  const recorded: unknown[] = [];
  return {
    warned,
    recorded,
    trusted: () => trusted,
    warn: (m: string) => warned.push(m),
    record: (r: unknown) => recorded.push(r),
  };
}

test("other server commands pass straight through, trusted or not", async () => {
  const d = deps(false);
  const sent: Array<[string, unknown[]]> = [];
  const result = await guardCommand("ddp-lsp.fixAll", ["file:///a.py"], (c, a) => (sent.push([c, a]), { applied: true }), d);
  assert.deepEqual(result, { applied: true });
  assert.deepEqual(sent, [["ddp-lsp.fixAll", ["file:///a.py"]]]);
  assert.deepEqual(d.recorded, []);
});

test("the preflight (e.g. from its code lens) is refused when untrusted, recorded when trusted", async () => {
  const untrusted = deps(false);
  let calls = 0;
  const next = async () => {
    calls += 1;
    return { ok: true, summary: "✗0 ⚠0 ✓1 –0" };
  };
  assert.equal(await guardCommand("ddp-lsp.runPreflight", ["file:///a.py"], next, untrusted), undefined);
  assert.equal(calls, 0);
  assert.deepEqual(untrusted.warned, [UNTRUSTED_PREFLIGHT]);
  const trusted = deps(true);
  const result = await guardCommand("ddp-lsp.runPreflight", ["file:///a.py"], next, trusted);
  assert.equal(calls, 1);
  assert.deepEqual(trusted.recorded, [result]);
});

test("the Run preflight lens is hidden only in untrusted workspaces", () => {
  const lenses = [
    { command: { command: "ddp-lsp.runPreflight", title: "Run preflight" } },
    { command: { command: "ddp-lsp.explainRule", title: "Explain" } },
    { command: undefined },
  ];
  assert.equal(filterLenses(lenses, true), lenses);
  assert.deepEqual(filterLenses(lenses, false), lenses.slice(1));
  assert.equal(filterLenses(null, false), null);
});

test("workspace/configuration answers for our section are mapped; others untouched", () => {
  const items = [{ section: "ddp-lsp" }, { section: "python" }];
  const raw = [{ ignore: ["DDP5"], interpreter: "/x", preflight: { python: "/t" } }, { other: 1 }];
  const [ours, theirs] = mapConfiguration(items, raw, false) as [Record<string, unknown>, unknown];
  assert.deepEqual(ours.ignore, ["DDP5"]);
  assert.deepEqual(ours.preflight, { python: null });
  assert.equal("interpreter" in ours, false);
  assert.deepEqual(theirs, { other: 1 });
  assert.equal(mapConfiguration(items, "an error", true), "an error");
});
