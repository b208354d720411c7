#!/usr/bin/python3
"""Fault injection against a real rdzvd, the rdzv CLI, real agents and the
shim (docs/reliability.md tells what each case showed).

    fault.py CASE --rdzvd EXE --rdzv EXE [--shim SO]
    fault.py list

Each case starts its own rdzvd on an ephemeral loopback port with a state
dir of its own. Output: TAP (one plan line, ok/not ok lines, # notes with
figures). Exit 0 pass, 1 fail; a case that cannot run here prints
"1..0 # SKIP reason" and exits 0 (meson's TAP protocol reads it as a
skip). Stdlib only: the ZMTP bytes of the half-message cases are written by
hand. The cases live by family in fault_journal.py, fault_network.py and
fault_agent.py; what they share in faultlib.py."""
import argparse
import sys

import fault_agent
import fault_http
import fault_journal
import fault_network
import fault_quota
import fault_readers
import fault_storm
from faultlib import TAP, Fail, Skip

CASES = {
    "torn_tail": fault_journal.case_torn_tail,
    "bitflip_payload": fault_journal.case_bitflip_payload,
    "bitflip_header": fault_journal.case_bitflip_header,
    "full_disk": fault_journal.case_full_disk,
    "half_message": fault_network.case_half_message,
    "stalled_peers": fault_network.case_stalled_peers,
    "slow_readers": fault_readers.case_slow_readers,
    "nonreaders_300": fault_readers.case_nonreaders_300,
    "pipelined_reader": fault_readers.case_pipelined_reader,
    "many_nodes_one_host": fault_readers.case_many_nodes_one_host,
    "storm_release": fault_storm.case_storm_release,
    "http_slowloris": fault_http.case_http_slowloris,
    "forming_lockout": fault_quota.case_forming_lockout,
    "reclaim_spares_waiters": fault_quota.case_reclaim_spares_waiters,
    "tenant_overlap_leak": fault_quota.case_tenant_overlap_leak,
    "member_bytes": fault_quota.case_member_bytes,
    "forming_hoard": fault_quota.case_forming_hoard,
    "fd_limit": fault_network.case_fd_limit,
    "vanish_10k": fault_network.case_vanish_10k,
    "agent_sigkill": fault_agent.case_agent_sigkill,
    "rdzvd_restart_reservations": fault_agent.case_rdzvd_restart_reservations,
    "dead_rank": fault_agent.case_dead_rank,
    "curve": fault_network.case_curve,
    "open_warning": fault_network.case_open_warning,
    "group_token": fault_network.case_group_token,
    "tenant_tokens": fault_network.case_tenant_tokens,
    "limits": fault_network.case_limits,
    "compaction": fault_journal.case_compaction,
}


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "list":
        print("\n".join(CASES))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--rdzv", required=True)
    ap.add_argument("--shim")
    opts = ap.parse_args()
    print("TAP version 13", flush=True)
    try:
        CASES[opts.case](opts)
    except Skip as e:
        if TAP.n == 0:
            print("1..0 # SKIP %s" % e, flush=True)
            return 0
        TAP.note("skipped the rest: %s" % e)
    except Fail as e:
        TAP.ok(False, str(e))
    except Exception as e:          # noqa: BLE001: a crash of the driver is a failure
        import traceback
        TAP.ok(False, "driver error: %r" % e)
        TAP.note(traceback.format_exc())
    print("1..%d" % TAP.n, flush=True)
    return 1 if TAP.failed else 0


if __name__ == "__main__":
    sys.exit(main())
