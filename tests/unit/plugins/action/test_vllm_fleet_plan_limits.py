"""The plan step's input boundary, through real ``ansible-playbook`` (issue 26, items 0, 0b, 5):

* a limit (``-l``) chooses which hosts change, never a deployment's shape: every deployment the
  play touches is planned over all of its inventory hosts, so a limited host's plan equals its
  plan in an unlimited run; a limit that cuts a multi-node instance, a P/D or a Mooncake
  cluster is refused naming the instance/deployment and the hosts outside the limit; hosts
  outside the limit of the touched deployments are checked against the contract, hosts of
  other deployments are not;
* variables the bundle sets itself (the plan, the checked run options, a check's switch, every
  fact and register of the playbooks) are refused as inputs, from the inventory or ``-e``; the
  playbooks' own play vars (status.yml's ``vllm_fleet_preamble_fit_checks``) are not inputs;
* ``-e key=value`` text whose value Ansible would cut at a space is refused;
* a deployment is the hosts whose resolved variables choose it, however the groups that set
  them nest; two groups that are not each other's parent and set one variable differently are
  refused naming host, groups, variable and both values.

The harness (inventory writer, ansible-playbook runner, crash check) is the contract test's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vllm_fleet_plan_contract import (  # noqa: E402
    ANSIBLE_PLAYBOOK, DSV3, ERNIE, PLAYBOOK, ROOT, Run, _assert_no_crash, _plans, _play, yaml)

pytestmark = pytest.mark.skipif(ANSIBLE_PLAYBOOK is None, reason="ansible-playbook not found")

H200 = {"vllm_fleet_recipe": ERNIE, "vllm_fleet_hardware": "h200"}
_MULTI = dict(H200, vllm_fleet_deployment="m", vllm_fleet_strategy="multi_node_tp", vllm_fleet_nodes=2,
              vllm_fleet_iface="eth0")
_PD = {"vllm_fleet_recipe": DSV3, "vllm_fleet_hardware": "h200", "vllm_fleet_strategy": "pd_cluster",
       "vllm_fleet_deployment": "pd",
       "vllm_fleet_pd_nodes": {"prefill": {"parallelism": "dep"}, "decode": {"parallelism": "tp"}}}
_MC = {"vllm_fleet_recipe": DSV3, "vllm_fleet_hardware": "h200", "vllm_fleet_strategy": "single_node_tp",
       "vllm_fleet_kv_offload": "kv_store_centralized_mooncake", "vllm_fleet_deployment": "mc"}


def _host(address: str, **variables: Any) -> Dict[str, Any]:
    return dict(variables, ansible_host=address)


def _inventory(hosts: Dict[str, Dict[str, Any]], children: Dict[str, Any] = None) -> str:
    data: Dict[str, Any] = {"all": {"vars": {"ansible_connection": "local",
                                             "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
                                    "hosts": hosts}}
    if children:
        data["all"]["children"] = children
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=False, width=1000)


FLEET = {
    # two 2-node instances (m1+m2, m3+m4)
    **{f"m{i}": _host(f"10.8.0.{i}", **_MULTI) for i in range(1, 5)},
    # three single-node instances
    **{f"s{i}": _host(f"10.8.1.{i}", **H200, vllm_fleet_deployment="s") for i in range(1, 4)},
    # P/D: prefill, decode, router
    "pd1": _host("10.8.2.1", **_PD, vllm_fleet_role="prefill"),
    "pd2": _host("10.8.2.2", **_PD, vllm_fleet_role="decode"),
    "pd3": _host("10.8.2.3", **_PD, vllm_fleet_role="router"),
    # Mooncake: an instance, and master + store + router
    "mc1": _host("10.8.3.1", **_MC),
    "mc2": _host("10.8.3.2", **_MC, vllm_fleet_role=["master", "store"]),
    "n1": _host("10.8.4.1"),
    # `vllm_fleet_recipe:` with no value beside other settings: unset, the host deploys nothing
    "nr": _host("10.8.9.1", vllm_fleet_recipe=None, vllm_fleet_port=8100),
}
# layered groups (kubespray style): the fleet sets the hardware, a child the recipe, a grandchild
# the deployment name; plus sibling groups that agree, and a child overriding its parent
LAYERED = {
    "fleet": {"vars": {"vllm_fleet_hardware": "h200", "vllm_fleet_port": 8100},
              "children": {"ernie": {"vars": {"vllm_fleet_recipe": ERNIE},
                                     "children": {"ernie_nest": {"vars": {"vllm_fleet_deployment": "nest",
                                                                          "vllm_fleet_port": 8200},
                                                                 "hosts": {"n1": None}}}}}},
    "rack_a": {"vars": {"vllm_fleet_served_model_name": "ernie"}, "hosts": {"n1": None}},
    "team_x": {"vars": {"vllm_fleet_served_model_name": "ernie"}, "hosts": {"n1": None}},
}
# the play vars status.yml and teardown.yml give _plan.yml: the bundle's own, not an input
STATUS_PLAYBOOK = PLAYBOOK.replace("  gather_facts: false\n",
                                   "  gather_facts: false\n  vars:\n    vllm_fleet_preamble_fit_checks: false\n", 1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, Run]:
    inventory = _inventory(FLEET, LAYERED)
    out = {"full": _play(tmp_path_factory.mktemp("full"), inventory, playbook=STATUS_PLAYBOOK)}
    out["cut"] = _play(tmp_path_factory.mktemp("cut"), inventory, "-l", "m2,m3,pd1,pd3,mc1")
    out["limited"] = _play(tmp_path_factory.mktemp("limited"), inventory, "-l", "m1,m2,s2,n1")
    return out


def test_unlimited_run_plans_layered_groups(runs):
    run = runs["full"]
    assert run.rc == 0, run.out[-4000:]
    plans = _plans(run)
    assert set(plans) == set(FLEET) - {"nr"}
    nest = plans["n1"]
    assert nest["deployment"] == "nest" and nest["recipe"] == ERNIE and nest["hardware"] == "h200"
    assert nest["health"]["port"] == 8200   # the grandchild's value overrides the fleet's


def test_limited_hosts_keep_their_unlimited_plans(runs):
    full, limited = _plans(runs["full"]), runs["limited"]
    assert limited.rc == 0, limited.out[-4000:]
    plans = _plans(limited)
    assert set(plans) == {"m1", "m2", "s2", "n1"}      # only the limit's hosts get a plan
    for host in plans:
        assert plans[host] == full[host], host          # names, ranks, instance, ports, hash
    assert [p["name"] for p in plans["s2"]["processes"]] == [p["name"] for p in full["s2"]["processes"]]
    assert plans["s2"]["instance_name"] == "i1" and plans["m1"]["instance_hosts"] == ["m1", "m2"]
    _assert_no_crash(limited)


def test_limit_that_cuts_instances_and_clusters_is_refused(runs):
    run = runs["cut"]
    assert run.rc != 0
    assert "the limit (-l / vllm_fleet_target) cuts what must change together (nothing was changed)" in run.out
    assert run.names("m2", "vllm_fleet_instance") and "m1 outside it" in run.out
    assert run.names("m3", "vllm_fleet_instance") and "m4 outside it" in run.out
    assert run.names("pd1", "vllm_fleet_deployment") and "'pd', a P/D cluster" in run.out and "pd2 outside it" in run.out
    assert run.names("mc1", "vllm_fleet_deployment") and "mc2 outside it" in run.out
    assert "Show the plans" not in run.out
    _assert_no_crash(run)


# ------------------------------------------------------------------------------------------
# hosts outside the limit: checked when their deployment is planned, not otherwise

def test_outside_hosts_of_the_deployment_are_checked(tmp_path):
    hosts = {"u1": _host("10.8.5.1", **H200, vllm_fleet_deployment="u"),
             "u2": _host("10.8.5.2", **H200, vllm_fleet_deployment="u", vllm_fleet_port="eighty"),
             "v1": _host("10.8.5.3", **H200, vllm_fleet_deployment="v"),
             "z1": _host("10.8.5.4", **H200, vllm_fleet_deployment="z", vllm_fleet_nodes="many")}
    inventory = _inventory(hosts)
    refused = _play(tmp_path / "u", inventory, "-l", "u1")
    assert refused.rc != 0 and refused.names("u2", "vllm_fleet_port"), refused.out[-3000:]
    assert "the inventory breaks the contract (nothing was changed), on hosts outside the limit" in refused.out
    assert not refused.names("z1", "vllm_fleet_nodes")
    _assert_no_crash(refused)
    planned = _play(tmp_path / "v", inventory, "-l", "v1")
    assert planned.rc == 0, planned.out[-3000:]
    assert set(_plans(planned)) == {"v1"}


def test_outside_hosts_take_their_deployments_detected_hardware(tmp_path):
    # hardware left to the GPU facts (fake nvidia-smi: H200 x8), deployments named: the hosts
    # outside the limit plan on the hardware their deployment's limited hosts detected
    gpu = {"vllm_fleet_recipe": ERNIE, "case_gpu": True}
    hosts = {"q1": _host("10.8.10.1", **gpu, vllm_fleet_deployment="q", vllm_fleet_strategy="multi_node_tp",
                         vllm_fleet_nodes=2, vllm_fleet_iface="eth0"),
             "q2": _host("10.8.10.2", **gpu, vllm_fleet_deployment="q", vllm_fleet_strategy="multi_node_tp",
                         vllm_fleet_nodes=2, vllm_fleet_iface="eth0"),
             "r1": _host("10.8.10.3", **gpu, vllm_fleet_deployment="r", vllm_fleet_replicas_per_host=1),
             "r2": _host("10.8.10.4", **gpu, vllm_fleet_deployment="r", vllm_fleet_replicas_per_host=1)}
    inventory = _inventory(hosts)
    cut = _play(tmp_path / "cut", inventory, "-l", "q2")
    assert cut.rc != 0 and "q2: vllm_fleet_instance: the limit cuts instance i0 of deployment 'q': q1 outside it" \
        in cut.out, cut.out[-3000:]
    _assert_no_crash(cut)
    # a limit of the router alone: its engines, all outside, leave their hardware to facts nobody read
    router = dict(hosts, rr=_host("10.8.10.5", vllm_fleet_recipe=ERNIE, vllm_fleet_deployment="r",
                                  vllm_fleet_role="router"))
    alone = _play(tmp_path / "router", _inventory(router), "-l", "rr")
    assert alone.rc != 0, alone.out[-3000:]
    assert "rr: vllm_fleet_deployment: the limit cuts 'r', a deployment whose engine hosts are all outside it: r1, r2 " \
        "(add them: -l rr,r1,r2)" in alone.out, alone.out[-3000:]
    _assert_no_crash(alone)
    one = _play(tmp_path / "one", inventory, "-l", "r2")
    assert one.rc == 0, one.out[-3000:]
    plan = _plans(one)["r2"]
    assert plan["instance_name"] == "i1" and plan["hardware"] == "h200", plan["instance_name"]


def test_outside_hosts_named_only_by_their_facts_are_not_guessed(tmp_path):
    # a1's deployment is named from its detected hardware (fake nvidia-smi: H200 x8); a2's would
    # be too, from facts a limited run does not read: refused, never guessed
    hosts = {"a1": {"vllm_fleet_recipe": ERNIE, "case_gpu": True},
             "a2": _host("10.8.8.2", vllm_fleet_recipe=ERNIE),
             "b1": _host("10.8.8.3", **H200, vllm_fleet_deployment="b")}
    inventory = _inventory(hosts)
    refused = _play(tmp_path / "a", inventory, "-l", "a1")
    assert refused.rc != 0 and refused.names("a2", "vllm_fleet_deployment"), refused.out[-3000:]
    assert "only its GPU facts name its deployment" in refused.out
    _assert_no_crash(refused)
    planned = _play(tmp_path / "b", inventory, "-l", "b1")   # b names its deployment: a2 is not its
    assert planned.rc == 0 and set(_plans(planned)) == {"b1"}, planned.out[-3000:]


# ------------------------------------------------------------------------------------------
# the bundle's own variables are not inputs; Ansible's key=value reading is not trusted

SENTINEL_PLAN = {"deployment": "evil", "processes": []}


def test_internal_variables_from_the_inventory_are_refused(tmp_path):
    hosts = {"i1": _host("10.8.6.1", **H200, vllm_fleet_plan=SENTINEL_PLAN),
             "i2": _host("10.8.6.2", **H200, vllm_fleet_deployment="i2"),
             "i3": _host("10.8.6.3", **H200, vllm_fleet_deployment="i3", vllm_fleet_deploy_steps=[]),
             # two sibling groups that set one variable differently (Ansible keeps one silently)
             "c1": _host("10.8.6.4", **H200, vllm_fleet_deployment="c1"),
             "c2": _host("10.8.6.5", **H200, vllm_fleet_deployment="c2")}
    children = {"switches": {"vars": {"vllm_fleet_current": True}, "hosts": {"i2": None}},
                "ports_a": {"vars": {"vllm_fleet_port": 8100}, "hosts": {"c1": None}},
                "ports_b": {"vars": {"vllm_fleet_port": 8200}, "hosts": {"c1": None}},
                # the value Ansible would drop is quoted too: masked like every other
                "meta_a": {"vars": {"vllm_fleet_mooncake_config": {"metadata_server": "redis://u:PwSeNtInEl1@m:1"}},
                           "hosts": {"c2": None}},
                "meta_b": {"vars": {"vllm_fleet_mooncake_config": {"metadata_server": "redis://u:PwSeNtInEl2@m:1"}},
                           "hosts": {"c2": None}}}
    run = _play(tmp_path, _inventory(hosts, children))
    assert run.rc != 0
    assert run.names("i1", "vllm_fleet_plan") and "remove it from the host's variables" in run.out
    assert run.names("i2", "vllm_fleet_current") and "from group switches" in run.out
    assert run.names("i3", "vllm_fleet_deploy_steps") and "playbooks/_deploy.yml" in run.out
    assert run.names("c1", "vllm_fleet_port")
    assert "ports_a sets '8100'; ports_b sets '8200'" in run.out
    assert run.names("c2", "vllm_fleet_mooncake_config") and "meta_a sets" in run.out
    assert "PwSeNtInEl" not in run.out
    assert "Plan every deployment" not in run.out
    _assert_no_crash(run)


@pytest.mark.parametrize("extra, var", [
    (["-e", "vllm_fleet_preamble_fit_checks=false"], "vllm_fleet_preamble_fit_checks"),
    (["-e", '{"vllm_fleet_run": {"state_dir": "/etc"}}'], "vllm_fleet_run"),
    (["-e", "vllm_fleet_current=true"], "vllm_fleet_current"),
    (["-e", "vllm_fleet_change_note=max-model-len 4096"], "vllm_fleet_change_note"),
    # a role's check of its plan (its vars/main.yml) cannot be switched off from outside
    (["-e", "vllm_fleet_docker_plan_checked=true"], "vllm_fleet_docker_plan_checked"),
], ids=["fit-checks", "run-json", "current", "note-cut-at-space", "plan-checked"])
def test_internal_variables_and_cut_values_from_extra_vars_are_refused(tmp_path, extra, var):
    run = _play(tmp_path, _inventory({"e1": _host("10.8.7.1", **H200)}), *extra)
    assert run.rc != 0, run.out[-3000:]
    assert f"-e: {var}: " in run.out, run.out[-3000:]
    assert "Plan every deployment" not in run.out
    _assert_no_crash(run)


def test_quoted_extra_vars_are_accepted(tmp_path):
    run = _play(tmp_path, _inventory({"e1": _host("10.8.7.1", **H200)}),
                "-e", '{"vllm_fleet_change_note": "max-model-len 4096"}', "-e", "vllm_fleet_force=true")
    assert run.rc == 0, run.out[-3000:]


def test_set_by_bundle_lists_the_playbooks_own_variables():
    sys.path.insert(0, str(ROOT / "plugins" / "action"))
    import vllm_fleet_plan as action   # noqa: E402 - the plugin module itself

    from vllm_fleet import contract

    found = action.set_by_bundle(str(ROOT))
    for name in ("vllm_fleet_plan", "vllm_fleet_run", "vllm_fleet_current", "vllm_fleet_preamble_fit_checks",
                 "vllm_fleet_preamble_plans", "vllm_fleet_deploy_steps", "vllm_fleet_outcome",
                 "vllm_fleet_processes", "vllm_fleet_uv_venv"):
        assert name in found, name
    assert not set(found) & set(contract.BY_NAME)
    defaults: List[str] = []
    for path in (ROOT / "roles").glob("*/defaults/main.yml"):
        defaults += list(yaml.safe_load(path.read_text()) or {})
    assert not set(found) & set(defaults)



def test_a_refusal_says_each_problem_once_and_a_derived_deployment_name_says_so():
    sys.path.insert(0, str(ROOT / "plugins" / "action"))
    import vllm_fleet_plan as action   # noqa: E402 - the plugin module itself

    from ansible.errors import AnsibleActionFail
    from vllm_fleet import loader
    from vllm_fleet.contract import settings_of
    from vllm_fleet.plan import HostInput, plan_fleet

    with pytest.raises(AnsibleActionFail) as raised:
        action._fail("header:", ["h1: vllm_fleet_x: bad", "block:\nh1: vllm_fleet_x: bad\nh2: vllm_fleet_y: bad"])
    assert str(raised.value) == "header:\nh1: vllm_fleet_x: bad\nblock:\nh2: vllm_fleet_y: bad"
    settings = settings_of({"vllm_fleet_recipe": ERNIE, "vllm_fleet_hardware": "h200", "vllm_fleet_nodes": 2,
                            "vllm_fleet_strategy": "single_node_tp"})
    hosts = [HostInput(name="d1", settings=dict(settings)), HostInput(name="d2", settings=dict(settings, deployment="named"))]
    _, problems = plan_fleet(loader.load([ROOT / "recipes"]), hosts)
    derived = [p for p in problems if "named from the recipe and hardware; vllm_fleet_deployment names it" in p]
    assert len(derived) == 1 and "'ernie-4-5-vl-28b-a3b-pt-h200'" in derived[0], problems
    assert any(p.startswith("vllm-fleet plan failed for deployment 'named':") for p in problems), problems
