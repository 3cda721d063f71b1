"""A profile at one micro-batch size, carried to others: in proportion (one size measured) against the fitted line
(measure.fit_sizes over three sizes), each beside a profile taken at that size, in one run on this machine.

For each model (bert-tiny and bert-mini, sequence 32, one thread): profile_model at B = 8 alone, and at B = 2, 8, 32
fitted; then profiles taken at B = 1, 4, 16, 64 (none of them fitted on). Compared: a micro-batch's compute summed over
the layers, forward + backward (what schedules that do not split are predicted from) and forward + B + W (the split
backward, what zero-bubble schedules are predicted from). Each number is the median of three profiles, the kinds
taking turns.

Run: .venv/bin/python bench/bench_sizes.py     (about 3 minutes on 2 cores; prints a markdown table)
"""
import statistics
import torch
from chimera_nb.measure import profile_model

FIT_ON, CHECK = (2, 8, 32), (1, 4, 16, 64)


def compute(p, split=False):
    return sum(l.forward_s + (l.input_grad_s + l.weight_grad_s if split else l.backward_s) for l in p.layers)


def main(rounds=3):
    torch.set_num_threads(1)
    print("| model | backward | B | measured at B (ms) | from B = 8, in proportion (ms) | error | fitted over B = 2, 8, 32 (ms) | error |")
    print("|---|---|---|---|---|---|---|---|")
    errs = {}
    for model in ('bert-tiny', 'bert-mini'):
        one, fit, direct = [], [], {B: [] for B in CHECK}
        for _ in range(rounds):
            one.append(profile_model(model, 8, 32, repeats=5, device='cpu'))
            fit.append(profile_model(model, 8, 32, repeats=5, device='cpu', sizes=FIT_ON[::2]))
            for B in CHECK: direct[B].append(profile_model(model, B, 32, repeats=5, device='cpu'))
        for split in (False, True):
            for B in CHECK:
                m = statistics.median(compute(p, split) for p in direct[B])
                a, b = (statistics.median(compute(p.at(B), split) for p in ps) for ps in (one, fit))
                errs.setdefault(split, []).append((abs(a / m - 1), abs(b / m - 1)))
                print(f"| {model} | {'split (B + W)' if split else 'whole'} | {B} | {m * 1e3:.2f} | {a * 1e3:.2f} | {a / m - 1:+.0%} | "
                      f"{b * 1e3:.2f} | {b / m - 1:+.0%} |", flush=True)
    for split, e in errs.items():
        print(f"mean absolute error, {'split' if split else 'whole'} backward: in proportion {statistics.fmean(x for x, _ in e):.1%}, "
              f"fitted {statistics.fmean(y for _, y in e):.1%}")


if __name__ == '__main__':
    main()
