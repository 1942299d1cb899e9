#!/usr/bin/env python3
# validate-events.py: checks JSON-lines files of tcpvigil events against docs/schema/events-v1.schema.json.
"""Usage: validate-events.py [--schema FILE] EVENTS.jsonl...  ("-" reads stdin)

Exit 0 when every line is valid, 1 when a line is not (each error printed with file:line),
2 on bad usage (missing file, python3-jsonschema not installed)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "docs", "schema", "events-v1.schema.json")


def main(argv):
    schema_path = DEFAULT
    if argv[:1] == ["--schema"] and len(argv) > 1:
        schema_path, argv = argv[1], argv[2:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import jsonschema
    except ImportError:
        print("validate-events: python3-jsonschema is not installed (apt-get install python3-jsonschema)", file=sys.stderr)
        return 2
    with open(schema_path) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)
    bad = lines = 0
    for path in argv:
        try:
            src = sys.stdin if path == "-" else open(path)
        except OSError as e:
            print(f"validate-events: {e}", file=sys.stderr)
            return 2
        with src:
            for n, line in enumerate(src, 1):
                if not line.strip():
                    continue
                lines += 1
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    print(f"{path}:{n}: not JSON: {e}")
                    bad += 1
                    continue
                errs = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
                for e in errs:
                    where = "/".join(str(p) for p in e.path) or "(line)"
                    print(f"{path}:{n}: {where}: {e.message}")
                bad += bool(errs)
    print(f"validate-events: {lines} lines, {bad} invalid", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
