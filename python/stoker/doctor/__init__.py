"""stoker doctor: which roofline bounds training, the model's or the data supply's, and what to
change.

    report = stoker.diagnose(loader, step=train_step, steps=200)
    print(report.summary())
    report.write_report("doctor-report")       # HTML with PNG plots

    with stoker.profile(loader) as prof:        # around your own loop instead
        for batch in loader:
            train_step(batch)
    # on exit: the summary printed (str(prof)), the report written into stoker-profile/

    $ stoker doctor path/to/dataset --batch-size 32 --step-ms 120

One run measures:
1. the compute-only rate: the step repeated on one batch held in memory, already on the
   device, synchronized on a GPU;
2. the input-only rate: the loader iterated with no step;
3. both together: ``data_wait`` per step (the time the trainer blocked in ``next``), the step
   time and the wall time;
4. the stage breakdown: sampling, index, decode (split into seek, decode and convert),
   transform, collate and host-to-device copy;
5. a thread sweep of the input-only rate from 1 thread to the core count.

The verdict follows docs/doctor.md's decision table.

The package's modules: :mod:`~stoker.doctor.measure` runs the measurements,
:mod:`~stoker.doctor.verdict` turns them into the bound, the verdict and the advice,
:mod:`~stoker.doctor.report` shows them (summary text, JSON, HTML with plots), and
:mod:`~stoker.doctor.command` is ``stoker doctor`` on the command line.
:mod:`~stoker.doctor.shard_mix` checks a shard loader's first batches' label mix
(:func:`check_batch_mix`), and :mod:`~stoker.doctor.ray_sweep` is ``stoker doctor --ray``:
the same method on a Ray cluster.
"""

from stoker.doctor.command import add_arguments, default_spec, main
from stoker.doctor.measure import diagnose, profile, synthetic_step
from stoker.doctor.report import Diagnosis, SweepPoint
from stoker.doctor.shard_mix import BatchMix, check_batch_mix

__all__ = [
    "BatchMix",
    "Diagnosis",
    "SweepPoint",
    "add_arguments",
    "check_batch_mix",
    "default_spec",
    "diagnose",
    "main",
    "profile",
    "synthetic_step",
]
