/**
 * A stand-in for the `vscode` module in unit tests (esbuild aliases `vscode` to this file).
 *
 * It implements only what the extension calls, records what the extension did (messages,
 * registered commands, terminals) and lets a test script the user's answers and settings.
 * Anything the extension starts calling that is missing here fails the build's type check or
 * throws in the test, rather than passing silently.
 */

type Listener<T> = (e: T) => unknown;

export class EventEmitter<T> {
  private listeners: Listener<T>[] = [];
  readonly event = (listener: Listener<T>): Disposable => {
    this.listeners.push(listener);
    return new Disposable(() => {
      this.listeners = this.listeners.filter((l) => l !== listener);
    });
  };
  async fire(e: T): Promise<void> {
    for (const l of [...this.listeners]) {
      await l(e);
    }
  }
}

export class Disposable {
  constructor(private readonly fn: () => unknown = () => undefined) {}
  dispose(): void {
    this.fn();
  }
}

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly fsPath: string,
  ) {}
  static file(path: string): Uri {
    return new Uri("file", path);
  }
  static parse(value: string): Uri {
    const m = /^([a-z][\w+.-]*):\/\/(.*)$/.exec(value);
    if (!m) {
      throw new Error(`not a URI: ${value}`);
    }
    return new Uri(m[1]!, m[2]!.split("/").map(decodeURIComponent).join("/"));
  }
  toString(): string {
    return `${this.scheme}://${this.fsPath.split("/").map(encodeURIComponent).join("/")}`;
  }
}

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}

export class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
}

export class Location {
  constructor(
    readonly uri: Uri,
    readonly range: Range,
  ) {}
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}

export enum ProgressLocation {
  SourceControl = 1,
  Window = 10,
  Notification = 15,
}

export interface Message {
  level: "error" | "warning" | "information";
  text: string;
  actions: string[];
}

export class FakeOutputChannel {
  readonly lines: string[] = [];
  shown = 0;
  constructor(readonly name: string) {}
  appendLine(line: string): void {
    this.lines.push(line);
  }
  append(text: string): void {
    this.lines.push(text);
  }
  show(): void {
    this.shown += 1;
  }
  dispose(): void {}
}

export class FakeStatusBarItem {
  text = "";
  tooltip: string | undefined;
  name: string | undefined;
  command: string | undefined;
  backgroundColor: ThemeColor | undefined;
  visible = false;
  show(): void {
    this.visible = true;
  }
  hide(): void {
    this.visible = false;
  }
  dispose(): void {}
}

export class FakeTerminal {
  readonly sent: string[] = [];
  shown = false;
  constructor(readonly name: string) {}
  show(): void {
    this.shown = true;
  }
  sendText(text: string): void {
    this.sent.push(text);
  }
  dispose(): void {}
}

interface FakeEditor {
  document: { uri: Uri; languageId: string };
  selection: { active: Position };
}

/** Everything a test inspects or scripts. */
export const stub = {
  settings: new Map<string, unknown>(),
  messages: [] as Message[],
  /** Answers to the next messages, by a substring of their text; unmatched ones get undefined. */
  answers: new Map<string, string>(),
  commands: new Map<string, (...args: unknown[]) => unknown>(),
  executed: [] as Array<{ id: string; args: unknown[] }>,
  terminals: [] as FakeTerminal[],
  outputs: [] as FakeOutputChannel[],
  statusItems: [] as FakeStatusBarItem[],
  extensions: new Map<string, unknown>(),
  documents: [] as Array<{ uri: Uri; languageId: string; content: string }>,
  configurationChanged: new EventEmitter<{ affectsConfiguration(section: string): boolean }>(),
  trustGranted: new EventEmitter<void>(),
  terminalClosed: new EventEmitter<FakeTerminal>(),

  reset(): void {
    this.settings.clear();
    this.messages.length = 0;
    this.answers.clear();
    this.commands.clear();
    this.executed.length = 0;
    this.terminals.length = 0;
    this.outputs.length = 0;
    this.statusItems.length = 0;
    this.extensions.clear();
    this.documents.length = 0;
    this.configurationChanged = new EventEmitter();
    this.trustGranted = new EventEmitter();
    this.terminalClosed = new EventEmitter();
    workspace.isTrusted = true;
    workspace.workspaceFolders = [{ uri: Uri.file("/work/project"), name: "project", index: 0 }];
    window.activeTextEditor = undefined;
  },

  /** Changes settings (keys without the `ddp-lsp.` prefix) and fires the change event. */
  async changeSettings(values: Record<string, unknown>): Promise<void> {
    for (const [k, v] of Object.entries(values)) {
      this.settings.set(k, v);
    }
    const keys = Object.keys(values).map((k) => `ddp-lsp.${k}`);
    await this.configurationChanged.fire({
      affectsConfiguration: (section: string) => keys.some((k) => k === section || k.startsWith(`${section}.`)),
    });
  },
};

function message(level: Message["level"]) {
  return (text: string, ...actions: string[]): Promise<string | undefined> => {
    stub.messages.push({ level, text, actions });
    let answer: string | undefined;
    for (const [needle, choice] of stub.answers) {
      if (text.includes(needle)) {
        answer = choice;
      }
    }
    return Promise.resolve(answer);
  };
}

export const window = {
  activeTextEditor: undefined as FakeEditor | undefined,
  createOutputChannel(name: string): FakeOutputChannel {
    const channel = new FakeOutputChannel(name);
    stub.outputs.push(channel);
    return channel;
  },
  createStatusBarItem(): FakeStatusBarItem {
    const item = new FakeStatusBarItem();
    stub.statusItems.push(item);
    return item;
  },
  showErrorMessage: message("error"),
  showWarningMessage: message("warning"),
  showInformationMessage: message("information"),
  withProgress<R>(
    _options: unknown,
    task: (progress: { report(v: unknown): void }, token: { isCancellationRequested: boolean }) => Promise<R>,
  ): Promise<R> {
    return task({ report: () => undefined }, { isCancellationRequested: false });
  },
  createTerminal(options: { name: string }): FakeTerminal {
    const terminal = new FakeTerminal(options.name);
    stub.terminals.push(terminal);
    return terminal;
  },
  onDidCloseTerminal(listener: Listener<FakeTerminal>): Disposable {
    return stub.terminalClosed.event(listener);
  },
};

export const workspace = {
  isTrusted: true,
  workspaceFolders: undefined as Array<{ uri: Uri; name: string; index: number }> | undefined,
  getConfiguration(section: string) {
    if (section !== "ddp-lsp") {
      throw new Error(`unexpected configuration section ${section}`);
    }
    return {
      get<T>(key: string, fallback?: T): T | undefined {
        return stub.settings.has(key) ? (stub.settings.get(key) as T) : fallback;
      },
    };
  },
  onDidChangeConfiguration(listener: Listener<{ affectsConfiguration(section: string): boolean }>): Disposable {
    return stub.configurationChanged.event(listener);
  },
  onDidGrantWorkspaceTrust(listener: Listener<void>): Disposable {
    return stub.trustGranted.event(listener);
  },
  async openTextDocument(options: { language: string; content: string }): Promise<{ uri: Uri; languageId: string; content: string }> {
    const doc = { uri: Uri.file(`/untitled/${stub.documents.length + 1}`), languageId: options.language, content: options.content };
    stub.documents.push(doc);
    return doc;
  },
};

export const commands = {
  registerCommand(id: string, fn: (...args: unknown[]) => unknown): Disposable {
    if (stub.commands.has(id)) {
      throw new Error(`command '${id}' already exists`);
    }
    stub.commands.set(id, fn);
    return new Disposable(() => stub.commands.delete(id));
  },
  async executeCommand(id: string, ...args: unknown[]): Promise<unknown> {
    stub.executed.push({ id, args });
    const fn = stub.commands.get(id);
    return fn ? fn(...args) : undefined;
  },
};

export const extensions = {
  getExtension(id: string): unknown {
    return stub.extensions.get(id);
  },
};

stub.reset();
