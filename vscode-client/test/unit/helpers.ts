/** Shared bits for the unit tests: package.json and a fake language client. */

import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { ClientSpec, ServerClient } from "../../src/controller";
import { Disposable } from "../vscode-stub";

// Bundles run from out/test/unit; package.json is three levels up.
export const PACKAGE_DIR = join(__dirname, "..", "..", "..");

export interface PackageJson {
  contributes: {
    commands: Array<{ command: string; title: string; category?: string }>;
    configuration: { properties: Record<string, { default?: unknown; scope?: string }> };
  };
  capabilities: { untrustedWorkspaces: { supported: string; restrictedConfigurations: string[] } };
  engines: { vscode: string };
  devDependencies: Record<string, string>;
  main: string;
  icon: string;
}

export function packageJson(): PackageJson {
  return JSON.parse(readFileSync(join(PACKAGE_DIR, "package.json"), "utf8")) as PackageJson;
}

export class FakeClient implements ServerClient {
  readonly requests: Array<{ method: string; params: unknown }> = [];
  readonly notifications: Array<{ method: string; params: unknown }> = [];
  started = 0;
  stopped = 0;
  commands: string[] = ["ddp-lsp.fixAll", "ddp-lsp.explainRule"];
  /** Answers to `workspace/executeCommand`, by command id. */
  answers = new Map<string, unknown>();
  failStart: Error | undefined;
  private listeners: Array<(s: "starting" | "running" | "stopped") => void> = [];

  constructor(readonly spec: ClientSpec) {}

  async start(): Promise<void> {
    this.started += 1;
    if (this.failStart) {
      throw this.failStart;
    }
    this.listeners.forEach((l) => l("running"));
  }
  async stop(): Promise<void> {
    this.stopped += 1;
  }
  async sendRequest(method: string, params: unknown): Promise<unknown> {
    this.requests.push({ method, params });
    if (method === "workspace/executeCommand") {
      const answer = this.answers.get((params as { command: string }).command);
      if (answer instanceof Error) {
        throw answer;
      }
      return answer ?? null;
    }
    return null;
  }
  async sendNotification(method: string, params: unknown): Promise<void> {
    this.notifications.push({ method, params });
  }
  serverCommands(): readonly string[] {
    return this.commands;
  }
  onDidChangeState(listener: (s: "starting" | "running" | "stopped") => void): Disposable {
    this.listeners.push(listener);
    return new Disposable(() => (this.listeners = this.listeners.filter((l) => l !== listener)));
  }
}

/** Lets promise callbacks (message answers and their follow-ups) run. */
export async function settle(): Promise<void> {
  for (let i = 0; i < 10; i += 1) {
    await new Promise((resolve) => setImmediate(resolve));
  }
}
