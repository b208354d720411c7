#!/usr/bin/python3
"""Integration tests of `rdzv agent` and librdzv_shim.so (docs/agent.md) with a
real rdzvd, a real agent and real programs under LD_PRELOAD, on loopback.

    integration.py CASE --rdzvd EXE --rdzv EXE --shim SO --listener EXE \
        --close-race EXE

Each case starts its own rdzvd and agent on a managed range of its own
(BASE + 16 * index, 16 ports, 8 per rank), so cases may run in parallel.
The cases are in cases_leases.py (probes, listeners, what the engine leaves
behind, stalls and races), cases_lifecycle.py (epochs, CMD, signals,
deleted groups), cases_reserve.py (ports already taken when the agent
reserves) and cases_closed.py (no agent to reach: fail closed); the harness
is pod.py. One line for the case and exit 0 pass, 1 fail, 77 skip
(rdzvtest)."""
import signal
import sys

from cases_leases import (case_close_listener, case_dead_engine_listener, case_exhausted,  # noqa
                          case_foreign_listener, case_fork_before_first_bind, case_other_uid,
                          case_passthrough, case_port0_on_address, case_port0_probe,
                          case_probe_scan, case_probe_then_listener, case_probe_that_listens,
                          case_queued_reset, case_stalled_agent, case_stalled_agent_resumes,
                          case_two_processes_scan, case_zmq, close_race_case, listener_case,
                          replace_case)
from cases_lifecycle import (case_cmd, case_cmd_not_runnable, case_cmd_sighup,  # noqa
                             case_cmd_signal, case_env_file_mode, case_epoch_follows,
                             case_failed_start_resumes,
                             case_group_deleted, case_two_agents_one_netns,
                             case_new_engine_epoch, case_rank_taken, case_replan,
                             case_sidecar_sigquit)
from cases_closed import case_agent_bad_packets, case_fail_closed, case_not_in_plan  # noqa
from cases_reserve import (case_reserve_beside_listener, case_reserve_live_holder,  # noqa
                           case_reserve_lock_answers, case_reserve_squatted_lock,
                           case_reserve_squatter_leaves, case_reserve_time_wait,
                           case_reserve_time_wait_plain, case_reserve_went_round)
import rdzvtest
from pod import case_options, run_pod_case

POD_CASES = {
    "probe_scan": case_probe_scan,
    "two_processes_scan": case_two_processes_scan,
    "probe_then_listener": case_probe_then_listener,
    "port0_probe": case_port0_probe,
    "port0_on_address": case_port0_on_address,
    "probe_that_listens": case_probe_that_listens,
    "exhausted": case_exhausted,
    "foreign_listener": case_foreign_listener,
    "c_listener_v4": listener_case("v4"),
    "c_listener_v6only": listener_case("v6only"),
    "c_listener_dual": listener_case("dual"),
    "c_listener_addr": listener_case("addr"),
    "c_threads": listener_case("threads"),
    "c_fork": listener_case("fork"),
    "zmq": case_zmq,
    "other_uid": case_other_uid,
    "passthrough": case_passthrough,
    "close_listener": case_close_listener,
    "fork_before_first_bind": case_fork_before_first_bind,
    "dup2_over_listener": replace_case("dup2"),
    "dup3_over_listener": replace_case("dup3"),
    "close_range_listener": replace_case("close_range"),
    "dup2_over_listener_kept": replace_case("kept"),
    "close_range_unshare": replace_case("unshare"),
    "close_range_unshare_alone": replace_case("unshare_alone"),
    "vfork_child_close_range": replace_case("vfork"),
    "dead_engine_listener": case_dead_engine_listener,
    "queued_reset": case_queued_reset,
    "new_engine_epoch": case_new_engine_epoch,
    "close_race": close_race_case("race"),
    "close_race_dup2": close_race_case("race_dup2"),
    "close_stale_fd": close_race_case("stale", 4),
    "close_dup_pair": close_race_case("pair"),
    "vfork_child_bind": close_race_case("vfork"),
    "stalled_agent": case_stalled_agent,
    "stalled_agent_resumes": case_stalled_agent_resumes,
    "fail_closed": case_fail_closed,
    "not_in_plan": case_not_in_plan,
    "agent_bad_packets": case_agent_bad_packets,
}
OWN_CASES = {"cmd": case_cmd, "cmd_signal": case_cmd_signal,
             "cmd_not_runnable": case_cmd_not_runnable,
             "group_deleted": case_group_deleted, "replan": case_replan,
             "cmd_sighup": case_cmd_sighup, "sidecar_sigquit": case_sidecar_sigquit,
             "rank_taken": case_rank_taken, "epoch_follows": case_epoch_follows,
             "env_file_mode": case_env_file_mode,
             "two_agents_one_netns": case_two_agents_one_netns,
             "failed_start_resumes": case_failed_start_resumes,
             "reserve_time_wait": case_reserve_time_wait,
             "reserve_time_wait_plain": case_reserve_time_wait_plain,
             "reserve_squatted_lock": case_reserve_squatted_lock,
             "reserve_lock_answers": case_reserve_lock_answers,
             "reserve_squatter_leaves": case_reserve_squatter_leaves,
             "reserve_went_round": case_reserve_went_round,
             "reserve_live_holder": case_reserve_live_holder,
             "reserve_beside_listener": case_reserve_beside_listener}
CASES = list(POD_CASES) + list(OWN_CASES)


def main():
    # Started under nohup, SIGHUP would be ignored here and in every agent
    # and CMD (an ignored signal stays ignored across exec): the SIGHUP
    # case tests the agent, not the terminal.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    opts = case_options(CASES)
    if opts is None:
        return 0
    index = CASES.index(opts.case)
    if opts.case in OWN_CASES:
        return rdzvtest.run([(opts.case, lambda: OWN_CASES[opts.case](opts, index))])
    return rdzvtest.run([(opts.case, lambda: run_pod_case(opts, index, POD_CASES[opts.case]))])


if __name__ == "__main__":
    sys.exit(main())
