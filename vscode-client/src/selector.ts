/**
 * Which documents the client hands to ddp-lsp.
 *
 * Python files on disk and unsaved ones, and the Python cells of Jupyter notebooks. Cells have
 * the `vscode-notebook-cell` scheme: without their own filter, hover, code actions and code
 * lenses are never asked for in a notebook. Their text is not synchronised as text documents:
 * vscode-languageclient sends it through `notebookDocument/*`, because the server's
 * `notebookDocumentSync` (notebook type `jupyter-notebook`, cells `python`) claims those cells,
 * and the server analyses a notebook's cells together, in order.
 */

export const NOTEBOOK_TYPE = "jupyter-notebook";
export const CELL_SCHEME = "vscode-notebook-cell";

export const DOCUMENT_SELECTOR = [
  { scheme: "file", language: "python" },
  { scheme: "untitled", language: "python" },
  { scheme: CELL_SCHEME, language: "python" },
];
