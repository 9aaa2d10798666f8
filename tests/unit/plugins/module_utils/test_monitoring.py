"""vllm_fleet/monitoring.py: Prometheus file_sd targets from host plans (real plans of the example
inventory and hand-made ones for the address rules), and the prometheus.yml part."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from example_hosts import hosts_of   # tests/unit/example_hosts.py
from vllm_fleet import loader, monitoring
from vllm_fleet.plan import plan

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def cat():
    return loader.load([ROOT / "recipes"])


def test_targets_of_real_plans_pd_and_mooncake(cat):
    plans = {}
    for group in ("dsv3_pd", "dsv3_mooncake"):
        plans.update(plan(cat, hosts_of(group)))
    found = monitoring.targets(plans)
    # every vLLM server of the plans is a target, on its host's address and port, labelled
    servers = [(h, p) for h, hp in plans.items() for p in hp["processes"] if p["kind"] == "vllm"]
    assert len(found["vllm"]) == len(servers) > 0
    for group in found["vllm"]:
        labels = group["labels"]
        host = labels["host"]
        proc = next(p for h, p in servers if h == host and labels["instance"] == f"{h}/{p['name']}")
        assert group["targets"] == [f"{plans[host]['address']}:{proc['port']}"], group
        assert labels["deployment"] == plans[host]["deployment"] and labels["kind"] == "vllm"
        assert labels["role"] == proc["role"]
    # routers at their --prometheus-port (the plan always gives one), Mooncake masters at their admin port
    routers = [(h, p) for h, hp in plans.items() for p in hp["processes"] if p["kind"] == "router"]
    assert sorted(g["targets"][0] for g in found["router"]) == sorted(f"{plans[h]['address']}:29000" for h, _ in routers)
    assert [g["targets"][0].rsplit(":", 1)[1] for g in found["mooncake"]] == ["9003"]
    assert found["unreachable"] == []
    # instances are unique label sets (Prometheus keeps one target per label set)
    all_groups = found["vllm"] + found["router"] + found["mooncake"]
    assert len({json.dumps(g["labels"], sort_keys=True) for g in all_groups}) == len(all_groups)


def server(name, port=8000, bind=None, kind="vllm", argv=None, **extra):
    return {"name": name, "kind": kind, "serves_http": True, "port": port, "bind": bind, "role": "single",
            "argv": argv or ["vllm", "serve", "m"], **extra}


def test_loopback_servers_are_scraped_locally_or_named_as_unreachable():
    plans = {"a": {"deployment": "d", "instance_name": "i0", "address": "10.0.0.1",
                   "processes": [server("p-lo", bind="127.0.0.1"), server("p-any", 8001),
                                 server("p-ip", 8002, bind="10.0.0.7"), server("p-v6", 8003, bind="::1")]}}
    elsewhere = monitoring.targets(plans)
    assert [g["targets"] for g in elsewhere["vllm"]] == [["10.0.0.1:8001"], ["10.0.0.7:8002"]]
    assert len(elsewhere["unreachable"]) == 2 and elsewhere["unreachable"][0].startswith("a p-lo: its vllm metrics "
                                                                                           "listen on 127.0.0.1 only")
    here = monitoring.targets(plans, monitor_host="a")
    assert [g["targets"] for g in here["vllm"]] == [["127.0.0.1:8000"], ["127.0.0.1:8001"], ["10.0.0.7:8002"],
                                                    ["127.0.0.1:8003"]]
    assert here["unreachable"] == []
    v6 = monitoring.targets({"b": {"deployment": "d", "address": "fd00::5", "processes": [server("p", 8000)]}})
    assert v6["vllm"][0]["targets"] == ["[fd00::5]:8000"]


def test_a_router_bound_to_loopback_metrics_is_not_offered_to_a_remote_prometheus():
    router = server("r", 8000, kind="router", argv=["vllm-router", "--prometheus-host", "127.0.0.1",
                                                     "--prometheus-port", "29001"])
    found = monitoring.targets({"r1": {"deployment": "d", "address": "10.0.0.9", "processes": [router]}})
    assert found["router"] == [] and "r1 r: its router metrics listen on 127.0.0.1 only" in found["unreachable"][0]
    assert monitoring.targets({"r1": {"deployment": "d", "address": "10.0.0.9", "processes": [router]}},
                              "r1")["router"][0]["targets"] == ["127.0.0.1:29001"]


def test_files_summary_and_prometheus_config():
    found = monitoring.targets({"a": {"deployment": "d", "address": "10.0.0.1", "processes": [server("p")]}})
    files = monitoring.files(found)
    assert [f["name"] for f in files] == ["vllm-fleet-vllm.json", "vllm-fleet-router.json", "vllm-fleet-mooncake.json"]
    assert files[1]["groups"] == []      # written empty: Prometheus drops targets that are gone
    assert monitoring.summary(found) == "scrape targets: 1 vllm, 0 router, 0 mooncake"
    where = monitoring.paths("/etc/prometheus/vllm-fleet")
    assert where["targets"] == {f["job"]: f"/etc/prometheus/vllm-fleet/{f['name']}" for f in files}
    assert (where["part"], where["config"]) == ("/etc/prometheus/vllm-fleet/prometheus-vllm-fleet.yml",
                                                "/etc/prometheus/vllm-fleet/prometheus.yml")
    assert where["dropin"] == "/etc/systemd/system/prometheus.service.d/vllm-fleet.conf"
    assert where["dashboard"].endswith("/" + monitoring.DASHBOARD) and monitoring.paths("/m/")["dir"] == "/m"
    config = monitoring.prometheus_config("/etc/prometheus/vllm-fleet")
    assert config["rule_files"] == ["/etc/prometheus/vllm-fleet/vllm-fleet-rules.yml"]
    assert [j["file_sd_configs"][0]["files"] for j in config["scrape_configs"]] == [
        ["/etc/prometheus/vllm-fleet/vllm-fleet-vllm.json"], ["/etc/prometheus/vllm-fleet/vllm-fleet-router.json"],
        ["/etc/prometheus/vllm-fleet/vllm-fleet-mooncake.json"]]


def test_shipped_rules_and_dashboard_use_the_target_labels_and_vllm_names():
    rules = yaml.safe_load((ROOT / "playbooks" / "files" / "monitoring" / "vllm-fleet-rules.yml").read_text())
    names = [r["alert"] for r in rules["groups"][0]["rules"]]
    assert names[0] == "VllmFleetInstanceDown" and len(names) == len(set(names)) == 5
    dashboard = json.loads((ROOT / "playbooks" / "files" / "monitoring" / "vllm-fleet-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert all("$deployment" in e for e in exprs), exprs
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "deployment", "instance"}
    for metric in ("time_to_first_token_seconds", "request_time_per_output_token_seconds", "inter_token_latency_seconds",
                   "e2e_request_latency_seconds", "kv_cache_usage_perc", "num_requests_waiting", "num_preemptions_total",
                   "prefix_cache_hits_total"):
        assert any(f"vllm:{metric}" in e for e in exprs), metric


def test_a_whole_prometheus_yml_for_an_installed_prometheus():
    doc = monitoring.prometheus_yml("/etc/prometheus/vllm-fleet", "1s")
    assert doc["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert doc["rule_files"] == ["/etc/prometheus/vllm-fleet/vllm-fleet-rules.yml"]
    assert [j["job_name"] for j in doc["scrape_configs"]] == ["vllm-fleet-vllm", "vllm-fleet-router", "vllm-fleet-mooncake"]
    assert all(j["scrape_interval"] == "1s" for j in doc["scrape_configs"])
    assert doc["scrape_configs"][0]["file_sd_configs"] == [{"files": ["/etc/prometheus/vllm-fleet/vllm-fleet-vllm.json"]}]


@pytest.mark.parametrize("listen, url", [("127.0.0.1:9090", "http://127.0.0.1:9090"),
                                         ("0.0.0.0:9091", "http://127.0.0.1:9091"),
                                         ("10.0.0.5:9090", "http://10.0.0.5:9090")])
def test_where_the_monitoring_host_reaches_its_prometheus(listen, url):
    assert monitoring.listen_url(listen) == url
