"""module_utils/vllm_fleet_container.py: a rollout's container revisions (keep, commit, restore)
against a stand-in docker CLI that keeps containers in a dict and answers `docker inspect -f`
in the shape module_utils/vllm_fleet_process reads (test_vllm_fleet_process.py records it)."""

from __future__ import annotations

import json

import pytest

import vllm_fleet_container as vc

SUFFIX = "-prev"


class Docker:
    """name -> {"status": running|exited, "hash": label}; every call recorded."""

    def __init__(self, **containers):
        self.c = {name: dict(spec) for name, spec in containers.items()}
        self.calls = []
        self.fail = None   # (verb, stderr): that docker verb fails
        self.down = False  # the engine does not answer

    def __call__(self, argv):
        assert argv[0] == "docker", argv
        self.calls.append(argv[1:])
        verb = argv[1]
        if self.down:
            return 1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock"
        if self.fail and self.fail[0] == verb:
            return 1, "", self.fail[1]
        if verb == "inspect":
            spec = self.c.get(argv[-1])
            if spec is None:
                return 1, "", f"Error: No such container: {argv[-1]}"
            state = {"Status": spec["status"], "Running": spec["status"] == "running", "Restarting": False,
                     "Pid": 7, "ExitCode": 0, "StartedAt": "2026-12-05T07:01:02.1Z"}
            return 0, f"{json.dumps(state)}\t0\t{spec['hash']}\n", ""
        if verb == "rm":
            self.c.pop(argv[-1])
        elif verb == "stop":
            self.c[argv[-1]]["status"] = "exited"
        elif verb == "rename":
            self.c[argv[3]] = self.c.pop(argv[2])
        elif verb == "start":
            self.c[argv[-1]]["status"] = "running"
        return 0, "", ""

    def changes(self):
        return [c for c in self.calls if c[0] != "inspect"]


def procs(*names, hash_="new", port=8000):
    return [{"name": n, "hash": hash_, "port": port + i, "serves_http": True} for i, n in enumerate(names)]


def free(port):
    return True


def test_keep_stops_and_renames_only_the_other_revision_then_a_repeat_does_nothing():
    d = Docker(a={"status": "running", "hash": "old"}, b={"status": "running", "hash": "new"},
               **{"a-prev": {"status": "exited", "hash": "older"}})
    waited = []
    out = vc.keep(d, procs("a", "b", "c"), SUFFIX, 30, wait_port=lambda p: waited.append(p) or True)
    assert out["changed"] and out["kept"] == ["a"]
    assert d.changes() == [["rm", "-f", "a-prev"], ["stop", "-t", "30", "a"], ["rename", "a", "a-prev"]]
    assert d.c == {"a-prev": {"status": "exited", "hash": "old"}, "b": {"status": "running", "hash": "new"}}
    assert waited == [8000]
    d.calls.clear()
    again = vc.keep(d, procs("a", "b", "c"), SUFFIX, 30, wait_port=free)   # a is gone, b is current
    assert not again["changed"] and again["kept"] == [] and d.changes() == []


def test_keep_uses_the_finished_specs_stop_timeout_and_check_mode_changes_nothing():
    d = Docker(a={"status": "running", "hash": "old"}, b={"status": "running", "hash": "old"})
    plan = [{"name": "a", "hash": "new", "docker_run": {"stop_timeout": 120}},
            {"name": "b", "hash": "new"}]   # a recorded revision without the finished spec: the option's
    checked = vc.keep(d, plan, SUFFIX, 30, check=True, wait_port=free)
    assert checked["changed"] and checked["actions"] == ["a: would stop and keep as a-prev",
                                                         "b: would stop and keep as b-prev"] and d.changes() == []
    vc.keep(d, plan, SUFFIX, 30, wait_port=free)
    assert ["stop", "-t", "120", "a"] in d.changes() and ["stop", "-t", "30", "b"] in d.changes()


def test_keep_fails_when_the_port_stays_taken_or_docker_fails_naming_the_container():
    d = Docker(a={"status": "running", "hash": "old"})
    with pytest.raises(vc.ContainerError, match=r"a: port 8000 is still taken 60 s after"):
        vc.keep(d, procs("a"), SUFFIX, 30, wait_port=lambda p: False)
    d = Docker(a={"status": "running", "hash": "old"})
    d.fail = ("stop", "Error response from daemon: cannot stop container: permission denied")
    with pytest.raises(vc.ContainerError, match=r"^a: docker stop -t 30 a failed: .*permission denied"):
        vc.keep(d, procs("a"), SUFFIX, 30, wait_port=free)
    d = Docker(a={"status": "running", "hash": "old"})
    d.down = True
    with pytest.raises(vc.ContainerError, match=r"a: the docker engine did not say its state .*Cannot connect"):
        vc.keep(d, procs("a"), SUFFIX, 30, wait_port=free)


def test_commit_removes_the_kept_revisions_once():
    d = Docker(a={"status": "running", "hash": "new"}, **{"a-prev": {"status": "exited", "hash": "old"}})
    assert vc.commit(d, procs("a", "b"), SUFFIX) == {"changed": True, "actions": ["a-prev: removed"]}
    assert d.c == {"a": {"status": "running", "hash": "new"}}
    assert vc.commit(d, procs("a", "b"), SUFFIX) == {"changed": False, "actions": []}


def test_restore_puts_back_what_the_rollout_changed_and_leaves_the_rest():
    d = Docker(a={"status": "exited", "hash": "new"}, **{"a-prev": {"status": "exited", "hash": "old"}},
               b={"status": "running", "hash": "new"},      # started, not kept (a first deploy): removed
               c={"status": "running", "hash": "old"},      # not reached: still the previous revision
               r={"status": "running", "hash": "old"})      # a retired engine never kept: left
    plan = procs("a", "b", "c") + [{"name": "r", "hash": "retired"}]
    out = vc.restore(d, plan, SUFFIX)
    assert out["changed"] and out["restored"] == ["a"]
    assert d.changes() == [["rm", "-f", "a"], ["rename", "a-prev", "a"], ["start", "a"], ["rm", "-f", "b"]]
    assert d.c == {"a": {"status": "running", "hash": "old"}, "c": {"status": "running", "hash": "old"},
                   "r": {"status": "running", "hash": "old"}}
    d.calls.clear()
    again = vc.restore(d, plan, SUFFIX)   # nothing kept, nothing new: a repeat changes nothing
    assert again == {"changed": False, "actions": [], "restored": []} and d.changes() == []


def test_port_free_waits_until_nothing_accepts():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        ticks = iter(range(100))
        assert vc.port_free(port, timeout=2, interval=0, clock=lambda: next(ticks), sleep=lambda _: None) is False
    assert vc.port_free(port, timeout=2) is True


class Images(Docker):
    """The stand-in docker with images: name -> id; `docker pull` adds the registry's."""

    def __init__(self, local, registry):
        super().__init__()
        self.local, self.registry = dict(local), dict(registry)

    def __call__(self, argv):
        if argv[1] == "image":
            self.calls.append(argv[1:])
            got = self.local.get(argv[-1])
            return (0, got + "\n", "") if got else (1, "", f"Error: No such image: {argv[-1]}")
        if argv[1] == "pull":
            self.calls.append(argv[1:])
            if argv[-1] not in self.registry:
                return 1, "", f"Error response from daemon: pull access denied for {argv[-1]}"
            self.local[argv[-1]] = self.registry[argv[-1]]
            return 0, "", ""
        return super().__call__(argv)


def test_prepare_creates_the_directories_then_a_repeat_changes_nothing(tmp_path):
    d = Images({"vllm/vllm-openai:latest": "sha256:bb", "router:1": "sha256:aa"}, {})
    hf, cc = tmp_path / "hf", tmp_path / "cc" / "i0"
    out = vc.prepare(d, [str(hf), str(cc)], [], ["vllm/vllm-openai:latest", "router:1"], "never")
    assert out["changed"] and out["identity"] == "sha256:aa,sha256:bb"
    assert hf.is_dir() and cc.is_dir() and oct(cc.stat().st_mode & 0o777) == "0o755"
    assert vc.prepare(d, [str(hf), str(cc)], [], ["router:1"], "never") == \
        {"changed": False, "actions": [], "identity": "sha256:aa"}
    cc.chmod(0o700)   # modified by hand: set back
    assert vc.prepare(d, [str(cc)], [], [], "never")["actions"] == [f"{cc}: mode set to 0755"]
    assert oct(cc.stat().st_mode & 0o777) == "0o755"


def test_prepare_pulls_as_the_policy_says_and_names_a_missing_image(tmp_path):
    d = Images({}, {"vllm/vllm-openai:v1": "sha256:cc"})
    out = vc.prepare(d, [], [], ["vllm/vllm-openai:v1"], "missing")
    assert out["identity"] == "sha256:cc" and ["pull", "--quiet", "vllm/vllm-openai:v1"] in d.calls
    d.calls.clear()
    vc.prepare(d, [], [], ["vllm/vllm-openai:v1"], "missing")   # present now: no pull
    assert [c for c in d.calls if c[0] == "pull"] == []
    vc.prepare(d, [], [], ["vllm/vllm-openai:v1"], "always")
    assert [c for c in d.calls if c[0] == "pull"] == [["pull", "--quiet", "vllm/vllm-openai:v1"]]
    with pytest.raises(vc.ContainerError, match=r"image\(s\) vllm/vllm-openai:v2 not present \(vllm_fleet_docker_pull "
                                                 r"is never\); load or pull them first"):
        vc.prepare(d, [], [], ["vllm/vllm-openai:v1", "vllm/vllm-openai:v2"], "never")
    with pytest.raises(vc.ContainerError, match=r"^vllm/vllm-openai:v2: docker pull --quiet vllm/vllm-openai:v2 "
                                                 r"failed: .*pull access denied"):
        vc.prepare(d, [], [], ["vllm/vllm-openai:v2"], "missing")
    checked = vc.prepare(d, [str(tmp_path / "x")], [], ["vllm/vllm-openai:v2"], "missing", check=True)
    assert checked["actions"] == [f"{tmp_path / 'x'}: would be created", "vllm/vllm-openai:v2: would be pulled"]
    assert not (tmp_path / "x").exists()


def test_prepare_refuses_a_missing_shared_cache_and_a_file_where_a_directory_goes(tmp_path):
    d = Images({}, {})
    with pytest.raises(vc.ContainerError, match=r"vllm_fleet_docker_hf_cache_shared .*/shared is not a directory"):
        vc.prepare(d, [], [str(tmp_path / "shared")], [])
    (tmp_path / "f").write_text("x")
    with pytest.raises(vc.ContainerError, match=r"/f exists and is not a directory"):
        vc.prepare(d, [str(tmp_path / "f")], [], [])
