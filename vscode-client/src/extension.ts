/**
 * Entry point: wires the controller to vscode-languageclient and the Python extension.
 *
 * Kept thin on purpose: everything that decides something lives in controller.ts and is unit
 * tested; this file only adapts `LanguageClient` to the small `ServerClient` interface and adds
 * the middleware that keeps the preflight off in untrusted workspaces.
 */

import * as vscode from "vscode";
import {
  LanguageClient,
  ResponseError,
  State,
  type LanguageClientOptions,
  type ServerOptions,
} from "vscode-languageclient/node";
import { Controller, type ClientSpec, type ServerClient } from "./controller";
import type { PythonExtensionApi } from "./interpreter";
import { classifyProbe, pythonEnv, runProbe } from "./probe";
import { filterLenses, guardCommand, mapConfiguration } from "./middleware";
import { SECTION } from "./settings";
import { DOCUMENT_SELECTOR } from "./selector";

let controller: Controller | undefined;

export function activate(context: vscode.ExtensionContext): void {
  controller = new Controller({
    createClient,
    serverCwd: context.extensionPath,
    probe: async (python, cwd) => classifyProbe(await runProbe(python, cwd)),
    pythonApi,
  });
  const current = controller;
  context.subscriptions.push({ dispose: () => void current.dispose() });
  // Not awaited: the commands are registered at once, and VS Code need not wait for the
  // Python extension and the server to start before finishing our activation.
  current.activate().catch((err: unknown) => current.output.appendLine(`[client] activation failed: ${String(err)}`));
}

export async function deactivate(): Promise<void> {
  await controller?.dispose();
  controller = undefined;
}

async function pythonApi(): Promise<PythonExtensionApi | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>("ms-python.python");
  if (!ext) {
    return undefined;
  }
  try {
    // The Python extension can take a while to activate; do not hold our server hostage to it.
    const exports = await Promise.race([
      ext.activate(),
      new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 15_000)),
    ]);
    return exports?.environments ? exports : undefined;
  } catch {
    return undefined;
  }
}

function createClient(spec: ClientSpec, output: vscode.OutputChannel): ServerClient {
  const serverOptions: ServerOptions = {
    command: spec.command,
    args: spec.args,
    options: { cwd: spec.cwd, env: pythonEnv() },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: DOCUMENT_SELECTOR,
    outputChannel: output,
    traceOutputChannel: output,
    initializationOptions: spec.initializationOptions,
    // Settings changes are sent by the controller (mapped and trust-filtered), not synchronized
    // raw by the client.
    middleware: {
      workspace: {
        configuration: async (params, token, next) =>
          mapConfiguration(params.items, await next(params, token), vscode.workspace.isTrusted) as
            | unknown[]
            | ResponseError<void>,
      },
      executeCommand: (command, args, next) =>
        guardCommand(command, args, next, {
          trusted: () => vscode.workspace.isTrusted,
          warn: (message) => void vscode.window.showWarningMessage(message),
          record: (result) => controller?.recordPreflight(result),
        }),
      provideCodeLenses: async (document, token, next) =>
        filterLenses(await next(document, token), vscode.workspace.isTrusted),
    },
  };
  const client = new LanguageClient(SECTION, "ddp-lsp", serverOptions, clientOptions);
  return {
    start: () => client.start(),
    stop: async () => {
      if (client.state !== State.Stopped) {
        await client.stop(5_000);
      }
    },
    sendRequest: (method, params, token) =>
      token ? client.sendRequest(method, params, token) : client.sendRequest(method, params),
    sendNotification: (method, params) => client.sendNotification(method, params),
    serverCommands: () => client.initializeResult?.capabilities.executeCommandProvider?.commands ?? [],
    onDidChangeState: (listener) =>
      client.onDidChangeState((e) =>
        listener(e.newState === State.Running ? "running" : e.newState === State.Starting ? "starting" : "stopped"),
      ),
  };
}
