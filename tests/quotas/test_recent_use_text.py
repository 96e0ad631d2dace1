"""The recent-use sentence of a line's page and of a request's impact (one include): units
on every figure, and "1 sample", not "1 samples" (session 31 read it on the demo). The
samples' spacing is not stated: "one a minute" was wrong on the simulator at 60x, where a
sample each wall-clock minute is one each cluster hour (session 41)."""

from __future__ import annotations

from django.template.loader import render_to_string


def sentence(**recent) -> str:
    return render_to_string("quotas/_recent_use.html", {"recent": recent}).strip()


def test_one_sample_is_singular_and_every_figure_has_its_unit():
    text = sentence(
        samples=1, peak_used=3501, avg_used=3501.0, peak_pending=0, avg_pending=0.0, days=7
    )
    assert text == (
        "Peak 3,501 GPUs, average 3,501.0 GPUs; pending demand peak 0 GPUs, average 0.0 GPUs "
        "(1 sample in the last 7 days)."
    )
    two = sentence(samples=2, peak_used=1, avg_used=0.5, peak_pending=0, avg_pending=0, days=1)
    assert two.endswith("(2 samples in the last 1 day).")


def test_no_samples_says_where_they_come_from():
    assert sentence(samples=0).startswith("No usage samples yet (they are taken every minute")


def test_a_peak_of_one_gpu_is_one_gpu():
    """A queue that held one GPU at most read "Peak 1 GPUs" on a request's impact, in the
    sentence and in the comparison above it."""
    from quotas import advice

    text = sentence(samples=2, peak_used=1, avg_used=0.5, peak_pending=1, avg_pending=0.5, days=7)
    assert text.startswith("Peak 1 GPU, average 0.5 GPUs; pending demand peak 1 GPU, average")
    use = advice.summarize_use([(0, 0, 1), (60, 1, 0)])
    assert advice.compare_use(use, 4, 0)[0] == (
        "Recent use: peak 1 GPU, average 0.5; pending demand peak 1 GPU, average 0.5."
    )
