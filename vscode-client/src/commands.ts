/**
 * Command ids, in one place.
 *
 * The client's palette commands have their own ids, different from the server's: the language
 * client registers every command the server advertises (`executeCommandProvider.commands`)
 * under the server's id, so that code lenses and code actions can run them, and registering
 * the same id here as well would fail with "command already exists".
 */

/** Commands this extension registers (package.json `contributes.commands`). */
export const CLIENT_COMMANDS = {
  runPreflight: "ddp-lsp.preflight",
  fixAll: "ddp-lsp.fixAllFile",
  peekRankPaths: "ddp-lsp.peekRankPaths",
  restart: "ddp-lsp.restart",
  showOutput: "ddp-lsp.showOutput",
} as const;

/** Commands the server executes (`workspace/executeCommand`). */
export const SERVER_COMMANDS = {
  fixAll: "ddp-lsp.fixAll",
  explainRule: "ddp-lsp.explainRule",
  runPreflight: "ddp-lsp.runPreflight",
  showRankPaths: "ddp-lsp.showRankPaths",
} as const;

export type ClientCommandId = (typeof CLIENT_COMMANDS)[keyof typeof CLIENT_COMMANDS];
