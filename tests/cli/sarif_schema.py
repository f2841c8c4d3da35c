"""A hand-written check of the parts of the SARIF 2.1.0 schema that ddp-lsp emits.

Nothing is downloaded at test time, so instead of the full JSON schema this encodes its
required properties, types and enumerations for the objects we produce (sarifLog, run,
tool, toolComponent, reportingDescriptor, result, location, physicalLocation,
artifactLocation, region, message, fix, notification, invocation), plus what GitHub code
scanning adds: a ruleId on every result, and relative URIs with forward slashes.
``problems(log)`` returns a list of human-readable violations (empty when valid).
"""

from __future__ import annotations

from typing import Any

LEVELS = {"none", "note", "warning", "error"}
COLUMN_KINDS = {"utf16CodeUnits", "unicodeCodePoints"}


class _Check:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def need(self, obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
        if not isinstance(obj, dict):
            self.problems.append(f"{where}: expected an object")
            return None
        if key not in obj:
            self.problems.append(f"{where}: missing required '{key}'")
            return None
        return self.typed(obj[key], kind, f"{where}.{key}")

    def typed(self, value: Any, kind: type | tuple[type, ...], where: str) -> Any:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.problems.append(f"{where}: expected {kind}, got {type(value).__name__}")
            return None
        return value

    def opt(self, obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
        if key not in obj:
            return None
        return self.typed(obj[key], kind, f"{where}.{key}")

    def message(self, msg: Any, where: str) -> None:
        if self.typed(msg, dict, where) is None:
            return
        if "text" not in msg and "id" not in msg:
            self.problems.append(f"{where}: a message needs 'text' or 'id'")
        self.opt(msg, "text", str, where)

    def multiformat(self, msg: Any, where: str) -> None:
        if self.typed(msg, dict, where) is not None:
            self.need(msg, "text", str, where)
            self.opt(msg, "markdown", str, where)

    def artifact_location(self, loc: Any, where: str) -> None:
        if self.typed(loc, dict, where) is None:
            return
        uri = self.opt(loc, "uri", str, where)
        if uri is not None:
            if "\\" in uri:
                self.problems.append(f"{where}.uri: backslash in {uri!r}")
            if not uri.startswith("file:") and uri.startswith("/"):
                self.problems.append(f"{where}.uri: absolute path without file: scheme")
        self.opt(loc, "uriBaseId", str, where)

    def region(self, region: Any, where: str) -> None:
        if self.typed(region, dict, where) is None:
            return
        start = self.opt(region, "startLine", int, where)
        if start is None:
            self.problems.append(f"{where}: a text region needs startLine")
            return
        values = {
            k: self.opt(region, k, int, where) for k in ("startColumn", "endLine", "endColumn")
        }
        for key, value in (("startLine", start), *values.items()):
            if value is not None and value < 1:
                self.problems.append(f"{where}.{key}: must be >= 1, got {value}")
        end_line = values["endLine"] or start
        if end_line < start:
            self.problems.append(f"{where}: endLine before startLine")
        if end_line == start and values["startColumn"] and values["endColumn"]:
            if values["endColumn"] < values["startColumn"]:
                self.problems.append(f"{where}: endColumn before startColumn")

    def physical_location(self, loc: Any, where: str) -> None:
        if self.typed(loc, dict, where) is None:
            return
        if "artifactLocation" not in loc and "address" not in loc:
            self.problems.append(f"{where}: needs artifactLocation or address")
        if "artifactLocation" in loc:
            self.artifact_location(loc["artifactLocation"], f"{where}.artifactLocation")
        if "region" in loc:
            self.region(loc["region"], f"{where}.region")

    def location(self, loc: Any, where: str) -> None:
        if self.typed(loc, dict, where) is None:
            return
        if "physicalLocation" in loc:
            self.physical_location(loc["physicalLocation"], f"{where}.physicalLocation")
        if "message" in loc:
            self.message(loc["message"], f"{where}.message")

    def descriptor(self, rule: Any, where: str) -> None:
        self.need(rule, "id", str, where)
        if not isinstance(rule, dict):
            return
        for key in ("shortDescription", "fullDescription", "help"):
            if key in rule:
                self.multiformat(rule[key], f"{where}.{key}")
        self.opt(rule, "helpUri", str, where)
        conf = self.opt(rule, "defaultConfiguration", dict, where)
        if conf is not None and conf.get("level") not in LEVELS:
            self.problems.append(f"{where}.defaultConfiguration.level: {conf.get('level')!r}")

    def fix(self, fix: Any, where: str) -> None:
        changes = self.need(fix, "artifactChanges", list, where)
        for i, change in enumerate(changes or []):
            w = f"{where}.artifactChanges[{i}]"
            loc = self.need(change, "artifactLocation", dict, w)
            if loc is not None:
                self.artifact_location(loc, f"{w}.artifactLocation")
            for j, rep in enumerate(self.need(change, "replacements", list, w) or []):
                region = self.need(rep, "deletedRegion", dict, f"{w}.replacements[{j}]")
                if region is not None:
                    self.region(region, f"{w}.replacements[{j}].deletedRegion")

    def result(self, result: Any, where: str, rule_ids: list[str]) -> None:
        if self.typed(result, dict, where) is None:
            return
        if "message" not in result:
            self.problems.append(f"{where}: missing required 'message'")
        else:
            self.message(result["message"], f"{where}.message")
        rule_id = self.opt(result, "ruleId", str, where)
        if rule_id is None:
            self.problems.append(f"{where}: GitHub code scanning needs a ruleId")
        index = self.opt(result, "ruleIndex", int, where)
        if index is not None and (index >= len(rule_ids) or rule_ids[index] != rule_id):
            self.problems.append(f"{where}.ruleIndex {index} does not point at {rule_id}")
        level = result.get("level", "warning")
        if level not in LEVELS:
            self.problems.append(f"{where}.level: {level!r}")
        for i, loc in enumerate(self.opt(result, "locations", list, where) or []):
            self.location(loc, f"{where}.locations[{i}]")
        for i, loc in enumerate(self.opt(result, "relatedLocations", list, where) or []):
            self.location(loc, f"{where}.relatedLocations[{i}]")
        for i, fix in enumerate(self.opt(result, "fixes", list, where) or []):
            self.fix(fix, f"{where}.fixes[{i}]")

    def run(self, run: Any, where: str) -> None:
        tool = self.need(run, "tool", dict, where)
        driver = self.need(tool, "driver", dict, f"{where}.tool") if tool is not None else None
        rule_ids: list[str] = []
        if driver is not None:
            self.need(driver, "name", str, f"{where}.tool.driver")
            for i, rule in enumerate(self.opt(driver, "rules", list, f"{where}.tool.driver") or []):
                self.descriptor(rule, f"{where}.tool.driver.rules[{i}]")
                rule_ids.append(rule.get("id", "") if isinstance(rule, dict) else "")
            if len(set(rule_ids)) != len(rule_ids):
                self.problems.append(f"{where}.tool.driver.rules: duplicate ids")
        if not isinstance(run, dict):
            return
        kind = run.get("columnKind", "utf16CodeUnits")
        if kind not in COLUMN_KINDS:
            self.problems.append(f"{where}.columnKind: {kind!r}")
        for i, inv in enumerate(self.opt(run, "invocations", list, where) or []):
            w = f"{where}.invocations[{i}]"
            self.need(inv, "executionSuccessful", bool, w)
            for j, note in enumerate(self.opt(inv, "toolExecutionNotifications", list, w) or []):
                if "message" not in note:
                    self.problems.append(f"{w}.toolExecutionNotifications[{j}]: missing message")
                else:
                    self.message(note["message"], f"{w}.toolExecutionNotifications[{j}].message")
                if note.get("level", "warning") not in LEVELS:
                    self.problems.append(f"{w}.toolExecutionNotifications[{j}].level")
        for i, result in enumerate(self.opt(run, "results", list, where) or []):
            self.result(result, f"{where}.results[{i}]", rule_ids)


def problems(log: Any) -> list[str]:
    check = _Check()
    if check.need(log, "version", str, "sarifLog") not in (None, "2.1.0"):
        check.problems.append("sarifLog.version: must be '2.1.0'")
    runs = check.need(log, "runs", list, "sarifLog")
    for i, run in enumerate(runs or []):
        check.run(run, f"runs[{i}]")
    return check.problems
