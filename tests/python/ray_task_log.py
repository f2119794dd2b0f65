"""A task_hook for stoker.integrations.ray's read tasks that tests can read back (test_ray.py,
test_ray_cluster.py)."""

import json


def event_log(path):
    """A task_hook appending each ReadTaskEvent to the file ``path`` (one JSON line; every
    worker of this machine's cluster, on any of its nodes, sees it), and a reader of the lines.
    The hook is a closure, so that Ray pickles it by value into the workers (which cannot
    import this module)."""

    def hook(event):
        with open(path, "a") as f:
            f.write(json.dumps(event.__dict__) + "\n")

    def read():
        with open(path) as f:
            return [json.loads(line) for line in f]

    return hook, read
