import assert from "node:assert/strict";
import { test } from "node:test";
import { CELL_SCHEME, DOCUMENT_SELECTOR } from "../../src/selector";

test("the document selector takes Python files, unsaved Python and Python notebook cells", () => {
  const schemes = DOCUMENT_SELECTOR.filter((f) => f.language === "python").map((f) => f.scheme);
  assert.deepEqual(new Set(schemes), new Set(["file", "untitled", CELL_SCHEME]));
  assert.equal(CELL_SCHEME, "vscode-notebook-cell");
});
