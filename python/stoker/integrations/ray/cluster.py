"""The Ray cluster stoker's Ray work runs on: joining it, and its size. Used by ``stoker etl
--ray`` (:mod:`stoker.writers.etl_tasks`) and the doctor's sweep
(:mod:`stoker.doctor.ray_sweep`)."""

from __future__ import annotations

try:
    import ray
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "stoker's Ray work needs Ray: pip install 'ray[data]' (stoker itself does not need it)"
    ) from error


def connect(address: str | bool | None) -> None:
    """Joins the Ray cluster at ``address`` (``True``/``"auto"``: the one ``RAY_ADDRESS`` or a
    running local cluster names, else a new local one; ``"local"``: a new local one), unless
    this process already is connected."""
    if ray.is_initialized():
        return
    if address is True or address in (None, "auto"):
        ray.init(ignore_reinit_error=True, include_dashboard=False)
    elif address == "local":
        ray.init(address="local", include_dashboard=False)
    else:
        ray.init(address=str(address), include_dashboard=False)


def cluster_cpus() -> int:
    """The CPUs of the cluster this process is connected to."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
