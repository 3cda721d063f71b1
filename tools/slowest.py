"""The test tiers' report from pytest's JUnit XML files: each file's counts and wall time, the slowest tests over all of
them, and one closing line of totals.   python tools/slowest.py build/test-reports/*.xml [--top 15]"""
import argparse, sys
import xml.etree.ElementTree as ET   # reads only the XML pytest itself wrote in this run
from pathlib import Path


def cases(path:Path) -> list:
    "(seconds, test id, outcome, CPU seconds or None) of every test case in one JUnit file."
    out = []
    for c in ET.parse(path).getroot().iter('testcase'):
        outcome = next((k.tag for k in c if k.tag in ('failure', 'error', 'skipped')), 'passed')
        cpu = next((float(p.get('value')) for p in c.iter('property') if p.get('name') == 'cpu_s'), None)
        out.append((float(c.get('time', 0)), f"{c.get('classname', '')}::{c.get('name', '')}", outcome, cpu))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('files', nargs='+', type=Path)
    ap.add_argument('--top', type=int, default=15)
    a = ap.parse_args(argv)
    every, counts = [], dict(passed=0, failed=0, skipped=0)
    for f in a.files:
        if not f.is_file(): print(f"{f}: no report (the phase did not run)"); continue
        suite = next(ET.parse(f).getroot().iter('testsuite'))
        cs = cases(f); every += cs
        for _, _, o, _ in cs: counts['failed' if o in ('failure', 'error') else o] += 1
        cpu = sum(c or 0 for *_, c in cs)
        print(f"{f.stem}: {len(cs)} tests in {float(suite.get('time', 0)):.0f} s wall, {cpu:.0f} CPU s in the test processes")
    print(f"\nthe {a.top} slowest tests (wall s, CPU s of the test's process and its children):")
    for secs, name, outcome, cpu in sorted(every, key=lambda c: -c[0])[:a.top]:
        print(f"{secs:8.1f} {'' if cpu is None else f'{cpu:6.1f}'}  {name}{'' if outcome == 'passed' else f'  ({outcome})'}")
    print(f"total: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 0


if __name__ == '__main__': sys.exit(main())
