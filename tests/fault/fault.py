#!/usr/bin/python3
"""Fault injection against a real rdzvd, the rdzv CLI, real agents and the
shim (docs/reliability.md tells what each case showed).

    fault.py CASE --rdzvd EXE --rdzv EXE [--shim SO]
    fault.py list

Each case starts its own rdzvd on an ephemeral loopback port with a state
dir of its own. Output (tests/lib/rdzvtest): a TAP line per check, # notes
with figures; exit 0 pass, 1 fail, 77 when the case cannot run here
("1..0 # SKIP reason"). Stdlib only: the ZMTP bytes of the half-message
cases are written by hand. The cases live by family in fault_journal.py,
fault_network.py and fault_agent.py; what they share in faultlib.py."""
import argparse
import os
import sys

try:
    import rdzvtest
except ImportError:     # run by hand (docs/reliability.md): meson's PYTHONPATH is not set
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import rdzvtest

import fault_agent  # noqa: E402
import fault_http  # noqa: E402
import fault_journal  # noqa: E402
import fault_network  # noqa: E402
import fault_quota  # noqa: E402
import fault_readers  # noqa: E402
import fault_storm  # noqa: E402
from faultlib import TAP  # noqa: E402

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
    "power_cut": fault_journal.case_power_cut,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--rdzv", required=True)
    ap.add_argument("--shim")
    ap.add_argument("--powercut")
    opts = rdzvtest.choose(CASES, ap)
    if opts is None:
        return 0
    with TAP:       # a Fail or crash ends the case as a failed check; Skip skips the rest
        CASES[opts.case](opts)
    return TAP.done()


if __name__ == "__main__":
    sys.exit(main())
