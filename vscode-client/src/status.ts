/**
 * The status bar item's content: the server's state and the last preflight verdict.
 *
 * Pure functions so the tests can check every state without a VS Code window.
 */

export type ServerState = "starting" | "running" | "stopped" | "disabled" | "missing" | "error";

export type Verdict = "pass" | "warn" | "fail" | "error";

export interface PreflightSummary {
  verdict: Verdict;
  passed: number;
  warned: number;
  failed: number;
  skipped: number;
  host?: string | undefined;
  error?: string | undefined;
  /** The server's rendering of the whole report, when it sent one. */
  markdown?: string | undefined;
}

export interface StatusView {
  text: string;
  tooltip: string;
  /** A theme colour id for the background, or undefined for the default. */
  background: "statusBarItem.errorBackground" | "statusBarItem.warningBackground" | undefined;
}

const STATE_ICON: Record<ServerState, string> = {
  starting: "$(sync~spin)",
  running: "$(check)",
  stopped: "$(debug-stop)",
  disabled: "$(circle-slash)",
  missing: "$(warning)",
  error: "$(error)",
};

const STATE_TEXT: Record<ServerState, string> = {
  starting: "ddp-lsp is starting",
  running: "ddp-lsp is running",
  stopped: "ddp-lsp is stopped",
  disabled: "ddp-lsp is disabled (ddp-lsp.enable)",
  missing: "ddp-lsp is not installed in the selected interpreter",
  error: "ddp-lsp failed to start",
};

const VERDICT_ICON: Record<Verdict, string> = {
  pass: "$(pass)",
  warn: "$(warning)",
  fail: "$(error)",
  error: "$(question)",
};

export function statusView(
  state: ServerState,
  preflight: PreflightSummary | undefined,
  detail?: string,
): StatusView {
  let text = `${STATE_ICON[state]} DDP`;
  const lines = [STATE_TEXT[state] + (detail ? ` (${detail})` : "")];
  if (preflight) {
    text += ` ${VERDICT_ICON[preflight.verdict]} preflight`;
    lines.push(preflightLine(preflight));
  } else {
    lines.push("Preflight: not run yet (DDP: Run preflight)");
  }
  lines.push("Click to show the output.");
  let background: StatusView["background"];
  if (state === "error" || state === "missing" || preflight?.verdict === "fail") {
    background = "statusBarItem.errorBackground";
  } else if (preflight?.verdict === "warn" || preflight?.verdict === "error") {
    background = "statusBarItem.warningBackground";
  }
  return { text, tooltip: lines.join("\n"), background };
}

export function preflightLine(s: PreflightSummary): string {
  if (s.verdict === "error") {
    return `Preflight: could not run${s.error ? `: ${s.error}` : ""}`;
  }
  const where = s.host ? ` on ${s.host}` : "";
  return `Preflight ${s.verdict}${where}: ${s.passed} passed, ${s.warned} warnings, ${s.failed} failed, ${s.skipped} skipped`;
}

function count(summary: Record<string, unknown>, key: string): number {
  const v = summary[key];
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

// The server's one-line summary (ddp_lsp.preflight.report.summary_counts), in either spelling:
// "✗1 ⚠0 ✓10 –4" or "1 fail, 0 warn, 10 pass, 4 skip".
const UNICODE_SUMMARY = /✗\s*(\d+)\s*⚠\s*(\d+)\s*✓\s*(\d+)\s*[–-]\s*(\d+)/u;
const ASCII_SUMMARY = /(\d+) fail, (\d+) warn, (\d+) pass, (\d+) skip/;

function parseSummaryLine(line: string): Record<string, number> | undefined {
  const u = UNICODE_SUMMARY.exec(line);
  if (u) {
    return { fail: Number(u[1]), warn: Number(u[2]), pass: Number(u[3]), skip: Number(u[4]) };
  }
  const a = ASCII_SUMMARY.exec(line);
  if (a) {
    return { fail: Number(a[1]), warn: Number(a[2]), pass: Number(a[3]), skip: Number(a[4]) };
  }
  return undefined;
}

/**
 * The verdict from `ddp-lsp.runPreflight`'s result.
 *
 * The server answers `{ok, error, folder, summary: "✗0 ⚠1 ✓10 –4", markdown}` (or
 * `{ok: false, error}` when the run could not start); a report in the `ddp-lsp-preflight/1`
 * schema (`summary` with counts by status), bare or under `report`, is read too. Anything else
 * is an error verdict rather than a guess.
 */
export function summarizePreflight(result: unknown): PreflightSummary {
  const empty = { passed: 0, warned: 0, failed: 0, skipped: 0 };
  if (result === null || typeof result !== "object") {
    return { verdict: "error", ...empty, error: "the server returned no report" };
  }
  let report = result as Record<string, unknown>;
  if (report.summary === undefined && report.report !== null && typeof report.report === "object") {
    report = report.report as Record<string, unknown>;
  }
  const host = typeof report.host === "string" ? report.host : undefined;
  const markdown = typeof report.markdown === "string" ? report.markdown : undefined;
  if ((typeof report.error === "string" && report.error) || report.ok === false) {
    const error = typeof report.error === "string" && report.error ? report.error : "the preflight failed";
    return { verdict: "error", ...empty, host, error, markdown };
  }
  const raw = report.summary;
  const summary = typeof raw === "string" ? parseSummaryLine(raw) : raw;
  if (summary === null || typeof summary !== "object") {
    return { verdict: "error", ...empty, host, error: "the report has no summary", markdown };
  }
  const s = summary as Record<string, unknown>;
  const passed = count(s, "pass");
  const warned = count(s, "warn");
  const failed = count(s, "fail");
  const skipped = count(s, "skip");
  const verdict: Verdict = failed > 0 ? "fail" : warned > 0 ? "warn" : "pass";
  return { verdict, passed, warned, failed, skipped, host, markdown };
}
