#!/usr/bin/env python3
"""Generate the tcpvigil Grafana dashboards (tcpvigil-fleet.json, tcpvigil-drilldown.json).

The JSON files are committed; CI regenerates them and fails on a difference:
    python3 dashboards/gen.py && git diff --exit-code dashboards/
Every query selects job=~"$job",instance=~"$instance" and counters only appear inside
rate()/increase(), as Grafana's dashboard linter asks.
"""
import json
import os

DS = {"type": "prometheus", "uid": "$datasource"}
SEL = 'job=~"$job",instance=~"$instance"'
SELC = SEL + ',transfer=~"$transfer",conn=~"$conn"'
# One named transfer's streams on the selected hosts (all hosts: the cross-host view).
SELT = SEL + ',transfer=~"$transfer",transfer!="",conn!="other"'

_ids = iter(range(1, 1000))


def target(expr, legend="", instant=False, fmt=None):
    t = {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": None}
    if instant:
        t["instant"] = True
        t["range"] = False
    if fmt:
        t["format"] = fmt
    return t


def panel(kind, title, description, targets, unit, x, y, w=12, h=8, **extra):
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    p = {
        "id": next(_ids),
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
    }
    if kind == "timeseries":
        p["fieldConfig"]["defaults"]["custom"] = {"lineWidth": 1, "fillOpacity": 0, "spanNulls": False}
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    for k, v in extra.items():
        if k == "custom":
            p["fieldConfig"]["defaults"].setdefault("custom", {}).update(v)
        elif k == "defaults":
            p["fieldConfig"]["defaults"].update(v)
        else:
            p[k] = v
    return p


def row(title, y):
    return {"id": next(_ids), "type": "row", "title": title, "collapsed": False,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []}


def query_var(name, label, query, all_value=".+", include_all=True):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": query,
        "definition": query,
        "refresh": 2,
        "multi": True,
        "includeAll": include_all,
        "allValue": all_value,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "sort": 1,
        "hide": 0,
        "regex": "",
    }


def templating(extra=()):
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "options": [], "refresh": 1, "regex": ""},
        query_var("job", "Job", "label_values(tcpvigil_build_info, job)"),
        query_var("instance", "Instance", 'label_values(tcpvigil_build_info{job=~"$job"}, instance)'),
        *extra,
    ]}


def dashboard(uid, title, description, panels, tmpl, links=()):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["tcpvigil", "tcp"],
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "refresh": "30s",
        "annotations": {"list": []},
        "links": list(links),
        "templating": tmpl,
        "panels": panels,
    }


def fleet():
    y = 0
    ps = [row("Now", y)]
    y += 1
    stat = lambda title, desc, expr, unit, x: panel("stat", title, desc, [target(expr, instant=True)], unit, x, y, w=4, h=4)
    ps += [
        stat("Stops in progress", "Connections with data outstanding and almost nothing delivered for many RTTs, now.",
             f"sum(tcpvigil_stops_in_progress{{{SEL}}})", "none", 0),
        stat("Unfair groups", "Transfer groups whose parallel streams share the path unfairly, now.",
             f"sum(tcpvigil_unfair_groups{{{SEL}}})", "none", 4),
        stat("Limited connections", "Connections held back by socket buffers or missing TCP options, now.",
             f"sum(tcpvigil_limited_connections{{{SEL}}})", "none", 8),
        stat("Goodput", "Bytes acknowledged per second over all tracked connections of the selected hosts.",
             f"sum(tcpvigil_conn_goodput_bytes_per_second{{{SEL}}})", "Bps", 12),
        stat("Tracked connections", "Open connections in the agents' tables.",
             f"sum(tcpvigil_tracked_connections{{{SEL}}})", "none", 16),
        stat("Agents up", "Agents Prometheus scraped successfully, out of the selected ones.",
             f"sum(up{{{SEL}}})", "none", 20),
    ]
    y += 4
    ps.append(row("Stops and loss recovery", y))
    y += 1
    ps += [
        panel("timeseries", "Stops by host, owner and cause",
              "Communication stops that ended per interval, by whose they were (network, receiver) and cause (cwnd collapse in Recovery, retransmissions lost again, RTO, ...).",
              [target(f"sum by (instance, owner, cause) (increase(tcpvigil_stops_total{{{SEL}}}[$__rate_interval]))",
                      "{{instance}} {{owner}} {{cause}}")], "short", 0, y),
        panel("timeseries", "Stops in progress by owner and cause", "Stops going on at each moment: the network's, a receiver's, or not yet decided.",
              [target(f"sum by (owner, cause) (tcpvigil_stops_in_progress{{{SEL}}})", "{{owner}} {{cause}}")], "short", 12, y),
    ]
    y += 8
    ps += [
        panel("timeseries", "Stop duration (p50, p90)", "Quantiles of how long ended stops lasted.",
              [target(f"histogram_quantile(0.5, sum by (le) (rate(tcpvigil_stop_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))", "p50"),
               target(f"histogram_quantile(0.9, sum by (le) (rate(tcpvigil_stop_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))", "p90")],
              "s", 0, y),
        panel("timeseries", "Retransmissions, lost retransmissions, RTOs",
              "Host-wide rates: retransmitted segments, retransmissions lost again, retransmission timeouts.",
              [target(f"sum by (instance) (rate(tcpvigil_retransmitted_segments_total{{{SEL}}}[$__rate_interval]))", "{{instance}} retransmitted"),
               target(f"sum by (instance) (rate(tcpvigil_lost_retransmissions_total{{{SEL}}}[$__rate_interval]))", "{{instance}} lost again"),
               target(f"sum by (instance) (rate(tcpvigil_retransmission_timeouts_total{{{SEL}}}[$__rate_interval]))", "{{instance}} RTO")],
              "pps", 12, y),
    ]
    y += 8
    ps += [
        panel("timeseries", "Path events",
              "Network stops of several connections to one remote prefix that began together, as one event per host (scope: all connections to it stopped, or only some: one ECMP member or one host).",
              [target(f"sum by (instance, scope) (tcpvigil_path_events_in_progress{{{SEL}}})", "{{instance}} {{scope}}")],
              "short", 0, y),
        panel("timeseries", "Hosts stopping towards one prefix",
              "How many of the selected hosts had a network stop towards each remote prefix in the last minute: two or more is one path event across hosts (the expression of the recording rule prefix:tcpvigil_stopping_instances:count1m, which the TcpvigilPathEventAcrossHosts alert reads, limited to the selected job and hosts).",
              [target(f"count by (prefix) (max_over_time(tcpvigil_prefix_stops_in_progress{{{SEL}}}[1m]) > 0)", "{{prefix}}")], "short", 12, y),
    ]
    y += 8
    ps += [
        panel("timeseries", "Share of bulk connections stopped",
              "Connections in a stop over the host's open bulk connections, by owner (the recording rule "
              "instance:tcpvigil_stopped_share:ratio). A quarter of them stopped in the network, or by a receiver, "
              "for a minute is what the host's stop alerts fire on; one stop among many is not.",
              [target(f"instance:tcpvigil_stopped_share:ratio{{{SEL}}}", "{{instance}} {{owner}}")],
              "percentunit", 0, y, w=24, h=6, defaults={"min": 0, "max": 1}),
    ]
    y += 6
    ps.append(row("Throughput, fairness, limits", y))
    y += 1
    ps += [
        panel("timeseries", "Goodput by host", "Bytes acknowledged per second, summed per host.",
              [target(f"sum by (instance) (tcpvigil_conn_goodput_bytes_per_second{{{SEL}}})", "{{instance}}")], "Bps", 0, y),
        panel("timeseries", "Limited connections by reason",
              "Connections held back by the receive window or send buffer, or by missing SACK / window scaling / a small MSS.",
              [target(f"sum by (reason) (tcpvigil_limited_connections{{{SEL}}})", "{{reason}}")], "short", 12, y),
    ]
    y += 8
    ps += [
        panel("table", "Unfair groups", "Groups the agent finds unfair now, most unfair first (Jain's index: 1 = even, 1/n = one stream moves everything).",
              [target(f"min by (instance, group) (tcpvigil_group_fairness_index{{{SEL}}})", instant=True, fmt="table")],
              "none", 0, y, w=24, h=6),
    ]
    y += 6
    ps.append(row("Agent health", y))
    y += 1
    ps += [
        panel("timeseries", "Records dropped and decode errors",
              "Kernel records lost (ring buffer full, reader channel full) and records that failed to decode. Should be zero.",
              [target(f"sum by (instance, stage) (rate(tcpvigil_dropped_records_total{{{SEL}}}[$__rate_interval]))", "{{instance}} {{stage}}"),
               target(f"sum by (instance) (rate(tcpvigil_decode_errors_total{{{SEL}}}[$__rate_interval]))", "{{instance}} decode")],
              "ops", 0, y, w=8),
        panel("timeseries", "BPF map pressure", "Failures the BPF programs counted (storage, retransmission map, options, iterator).",
              [target(f"sum by (instance, kind) (rate(tcpvigil_bpf_errors_total{{{SEL}}}[$__rate_interval]))", "{{instance}} {{kind}}")],
              "ops", 8, y, w=8),
        panel("timeseries", "BPF CPU by program", "Share of one CPU spent in each BPF program (estimated from kernel run-time statistics sampled 2 s in every 20 s; bpf.bpf_stats).",
              [target(f"sum by (instance, prog) (rate(tcpvigil_bpf_prog_run_time_seconds_total{{{SEL}}}[$__rate_interval]))", "{{instance}} {{prog}}")],
              "percentunit", 16, y, w=8),
    ]
    y += 8
    ps += [
        panel("table", "Hook variants", "Which hook variant each need got on each host (tcpvigil check explains why).",
              [target(f"max by (instance, need, variant) (tcpvigil_hook_variant_info{{{SEL}}})", instant=True, fmt="table")],
              "none", 0, y, w=24, h=6),
    ]
    links = [{"title": "Drill-down", "type": "dashboards", "tags": ["tcpvigil"], "asDropdown": False,
              "includeVars": True, "keepTime": True}]
    return dashboard("tcpvigil-fleet", "tcpvigil / Fleet",
                     "Stops, unfair transfers, limited connections and agent health over all hosts.",
                     ps, templating(), links)


def drilldown():
    y = 0
    ps = [row("Connections (top-K bulk connections per host)", y)]
    y += 1
    ps += [
        panel("timeseries", "Goodput and delivery rate",
              "Bytes acknowledged per second, and the kernel's ACK-rate bandwidth estimate (delivery rate), per connection. "
              "Prometheus sees scrape-interval bins; for RTT-scale bins use tcpvigil record + plot.",
              [target(f"tcpvigil_conn_goodput_bytes_per_second{{{SELC}}}", "{{instance}} {{conn}} {{comm}} goodput"),
               target(f"tcpvigil_conn_delivery_rate_bytes_per_second{{{SELC}}}", "{{instance}} {{conn}} delivery rate")],
              "Bps", 0, y),
        panel("timeseries", "cwnd and in_flight",
              "Congestion window and segments in flight (packets_out - lost_out - sacked_out + retrans_out): in a communication stop, in_flight falls to zero and cwnd to one segment.",
              [target(f"tcpvigil_conn_cwnd_segments{{{SELC}}}", "{{instance}} {{conn}} cwnd"),
               target(f"tcpvigil_conn_in_flight_segments{{{SELC}}}", "{{instance}} {{conn}} in_flight")],
              "short", 12, y),
    ]
    y += 8
    ps += [
        panel("state-timeline", "Stop timeline", "When each shown connection was in a communication stop.",
              [target(f"max by (instance, conn) (tcpvigil_conn_stop_in_progress{{{SELC}}})", "{{instance}} {{conn}}")],
              "none", 0, y, w=24, h=6,
              defaults={"mappings": [{"type": "value", "options": {
                  "0": {"text": "flowing", "color": "green", "index": 0},
                  "1": {"text": "stopped", "color": "red", "index": 1}}}]}),
    ]
    y += 6
    ps += [
        panel("timeseries", "Smoothed RTT", "The kernel's srtt per connection.",
              [target(f"tcpvigil_conn_srtt_seconds{{{SELC}}}", "{{instance}} {{conn}}")], "s", 0, y, w=8),
        panel("timeseries", "Efficiency", "Goodput over the best delivery rate seen on the connection: how much of what the path delivered at best the transfer gets.",
              [target(f"tcpvigil_conn_efficiency_ratio{{{SELC}}}", "{{instance}} {{conn}}")], "percentunit", 8, y, w=8,
              defaults={"min": 0, "max": 1}),
        panel("timeseries", "Everything else", "Connections outside the top-K, summed (conn=\"other\").",
              [target(f"tcpvigil_conn_goodput_bytes_per_second{{{SEL},conn=\"other\"}}", "{{instance}} goodput"),
               target(f"tcpvigil_conn_delivery_rate_bytes_per_second{{{SEL},conn=\"other\"}}", "{{instance}} delivery rate")],
              "Bps", 16, y, w=8),
    ]
    y += 8
    ps.append(row("Transfer: streams across hosts", y))
    y += 1
    good = f"tcpvigil_conn_goodput_bytes_per_second{{{SELT}}}"
    # The transfer recording rules (deploy/prometheus/tcpvigil.rules.yml): every host's streams of
    # a transfer, one-minute averages, the numbers TcpvigilUnfairTransferAcrossHosts reads. The
    # per-transfer ones have no job or instance label (dashboards/.lint excepts that panel).
    tr = 'transfer=~"$transfer"'
    ps += [
        panel("timeseries", "Per-stream share",
              "Each stream's share of its transfer's goodput over every host (one-minute averages; name transfers with "
              "[[export.transfers]]), on the selected hosts.",
              [target(f"transfer_conn:tcpvigil_goodput_share:ratio{{{SEL},{tr}}}", "{{transfer}} {{instance}} {{conn}}")],
              "percentunit", 0, y, custom={"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 60}),
        panel("timeseries", "Fairness across hosts",
              "Per transfer, over every host's streams (one-minute averages, as the alert sees them): Jain's index "
              "(1 = even, 1/n = one stream moves everything), slowest/fastest, and n x slowest / total (the efficiency an "
              "even split of the data would get).",
              [target(f"transfer:tcpvigil_fairness:jain{{{tr}}}", "{{transfer}} Jain"),
               target(f"transfer:tcpvigil_min_max:ratio{{{tr}}}", "{{transfer}} min/max"),
               target(f"transfer:tcpvigil_even_split_efficiency:ratio{{{tr}}}", "{{transfer}} even split")],
              "none", 12, y, defaults={"min": 0, "max": 1, "decimals": 2}),
    ]
    y += 8
    ps += [
        panel("timeseries", "Unfair groups found by the agent",
              "Per-host groups the detector finds unfair: Jain's index (1 = even) and the efficiency an even split would get.",
              [target(f"tcpvigil_group_fairness_index{{{SEL}}}", "{{instance}} {{group}} Jain"),
               target(f"tcpvigil_group_even_split_efficiency_ratio{{{SEL}}}", "{{instance}} {{group}} even split")],
              "none", 0, y, defaults={"min": 0, "max": 1, "decimals": 2}),
        panel("timeseries", "Transfer goodput by host", "Goodput of each named transfer, per host.",
              [target(f"sum by (transfer, instance) ({good})", "{{transfer}} {{instance}}")], "Bps", 12, y),
    ]
    y += 8
    ps.append(row("Host", y))
    y += 1
    ps += [
        panel("state-timeline", "Stops on the host by owner and cause", "Stops in progress on the selected hosts, by owner and cause.",
              [target(f"sum by (owner, cause) (tcpvigil_stops_in_progress{{{SEL}}})", "{{owner}} {{cause}}")], "none", 0, y, w=12, h=6),
        panel("timeseries", "Limited connections", "Connections held back by buffers or options, by reason.",
              [target(f"sum by (instance, reason) (tcpvigil_limited_connections{{{SEL}}})", "{{instance}} {{reason}}")],
              "short", 12, y, w=12, h=6),
    ]
    y += 6
    ps += [
        panel("timeseries", "Agent: records dropped", "Records lost on the way from the kernel (should be zero).",
              [target(f"sum by (instance, stage) (rate(tcpvigil_dropped_records_total{{{SEL}}}[$__rate_interval]))", "{{instance}} {{stage}}")],
              "ops", 0, y, w=12, h=6),
        panel("timeseries", "Agent: tracked, bulk and overflow connections",
              "Connections in the table, those that count as bulk, and those summed into conn=\"other\".",
              [target(f"sum by (instance) (tcpvigil_tracked_connections{{{SEL}}})", "{{instance}} tracked"),
               target(f"sum by (instance) (tcpvigil_bulk_connections{{{SEL}}})", "{{instance}} bulk"),
               target(f"sum by (instance) (tcpvigil_overflow_connections{{{SEL}}})", "{{instance}} other")],
              "short", 12, y, w=12, h=6),
    ]
    extra = [
        query_var("transfer", "Transfer",
                  'label_values(tcpvigil_conn_goodput_bytes_per_second{job=~"$job",instance=~"$instance"}, transfer)', ".*"),
        query_var("conn", "Connection",
                  'label_values(tcpvigil_conn_goodput_bytes_per_second{job=~"$job",instance=~"$instance",transfer=~"$transfer"}, conn)', ".+"),
    ]
    links = [{"title": "Fleet", "type": "dashboards", "tags": ["tcpvigil"], "asDropdown": False,
              "includeVars": True, "keepTime": True}]
    return dashboard("tcpvigil-drilldown", "tcpvigil / Host, transfer, connection",
                     "One host, one transfer split over hosts, one connection: goodput, cwnd and in_flight, stops, per-stream shares, agent health.",
                     ps, templating(extra), links)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, make in (("tcpvigil-fleet.json", fleet), ("tcpvigil-drilldown.json", drilldown)):
        global _ids
        _ids = iter(range(1, 1000))
        with open(os.path.join(here, name), "w") as f:
            json.dump(make(), f, indent=2, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
