#!/usr/bin/env bash
# Simulated hosts on this machine, for running Open MPI jobs across
# "machines": each host is a network namespace (weft-h1 ... weft-hN) with
# its own address (10.77.7.K/24) and, in every process run on it, its own
# hostname (a UTS namespace), the hosts joined by veth pairs to a bridge in
# a namespace of its own (weft-sw). Needs root, ip, unshare and, for
# --rate, tc.
#
#   bench/hosts.sh up N [--rate RATE] [--private DIR]
#       makes N hosts, first removing what an earlier (killed) run left.
#       --rate limits each host's link to RATE each way (tc token bucket,
#       e.g. 1gbit); --private DIR gives every host but the first its own
#       empty DIR (a tmpfs in a mount namespace), a folder not shared.
#   bench/hosts.sh down            removes the hosts and ends what runs on them
#   bench/hosts.sh exec K CMD...   runs CMD on host K (as mpirun's agent does)
#   bench/hosts.sh agent HOST CMD  mpirun's rsh agent: runs CMD on the host
#                                  with address HOST
#   bench/hosts.sh hostfile        prints an Open MPI hostfile, SLOTS (2) per host
#   bench/hosts.sh flags           prints mpirun's options for these hosts, one a line
#   bench/hosts.sh mpirun ARGS...  runs mpirun with those options on host 1
#   bench/hosts.sh link K up|down  sets host K's link up or down
#   bench/hosts.sh bench           bench/hosts-bench.sh: tokens/s and all-reduce latency
#   bench/hosts.sh hsdp            bench/hosts-hsdp.sh: hsdp against fsdp on links of 1 Gbit/s
set -euo pipefail
self=$(readlink -f "$0")
prefix=weft-h
switch=weft-sw
subnet=10.77.7
state=/run/weft-hosts # the hosts' settings, read by the agent

addr() { echo "$subnet.$1"; }

down() {
	for ns in $(ip netns list | awk '{print $1}' | grep -E "^($prefix[0-9]+|$switch)$" || true); do
		# End what runs there first: a namespace with processes outlives its deletion.
		for pid in $(ip netns pids "$ns"); do kill -9 "$pid" 2>/dev/null || true; done
		ip netns delete "$ns"
	done
	rm -rf "$state"
}

up() {
	local n=$1 rate="" private=""
	shift
	while [ $# -gt 0 ]; do
		case $1 in
		--rate) rate=$2; shift 2 ;;
		--private) private=$2; shift 2 ;;
		*) echo "hosts.sh up: unknown option $1 (accepted: --rate RATE, --private DIR)" >&2; exit 2 ;;
		esac
	done
	if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 2 ] || [ "$n" -gt 200 ]; then
		echo "hosts.sh up: $n hosts: accepted are 2 to 200" >&2
		exit 2
	fi
	down
	ip netns add "$switch"
	ip -n "$switch" link add br0 type bridge
	ip -n "$switch" link set br0 up
	for k in $(seq 1 "$n"); do
		local ns=$prefix$k
		ip netns add "$ns"
		ip link add eth0 netns "$ns" type veth peer name "h$k" netns "$switch"
		ip -n "$switch" link set "h$k" master br0 up
		ip -n "$ns" addr add "$(addr "$k")/24" dev eth0
		ip -n "$ns" link set lo up
		ip -n "$ns" link set eth0 up
		if [ -n "$rate" ]; then
			# Each way: what the host sends (eth0) and what it is sent (its bridge port).
			ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
			ip netns exec "$switch" tc qdisc add dev "h$k" root tbf rate "$rate" burst 256kb latency 50ms
		fi
	done
	mkdir -p "$state"
	printf 'hosts=%s\nprivate=%q\n' "$n" "$private" >"$state/env"
}

hosts() {
	[ -f "$state/env" ] || { echo "hosts.sh: no hosts are up (run bench/hosts.sh up N)" >&2; exit 1; }
	# shellcheck disable=SC1091
	. "$state/env"
}

# on K CMD... runs CMD on host K: in its network namespace, under a UTS
# namespace named weft-hK, with its private folder, if any.
on() {
	local k=$1
	shift
	hosts
	local mount=""
	if [ -n "$private" ] && [ "$k" != 1 ]; then
		mount="mkdir -p $(printf %q "$private") && mount -t tmpfs tmpfs $(printf %q "$private") &&"
	fi
	exec ip netns exec "$prefix$k" unshare --uts ${mount:+--mount --propagation private} \
		sh -c "hostname $prefix$k && $mount exec \"\$@\"" sh "$@"
}

# agent HOST CMD... is what mpirun runs to start its daemon on HOST (an
# address from the hostfile); CMD is one shell command line.
agent() {
	local host=$1
	shift
	case $host in
	"$subnet".*) on "${host##*.}" sh -c "$*" ;;
	*) echo "hosts.sh agent: $host is not a simulated host ($subnet.K)" >&2; exit 1 ;;
	esac
}

hostfile() {
	hosts
	for k in $(seq 1 "$hosts"); do echo "$(addr "$k") slots=${SLOTS:-2}"; done
}

# flags are mpirun's options for the simulated hosts. Real hosts need the
# same TCP settings (see docs/multi-host.md); only the agent is particular
# to the simulation. The keepalives let mpirun find a lost host's daemon
# within seconds (by default 300 s + 9 × 20 s), and so end the job.
flags() {
	cat <<EOF
--allow-run-as-root
--bind-to
none
--mca
plm_rsh_agent
$self agent
--mca
btl
tcp,self
--mca
btl_tcp_if_include
$subnet.0/24
--mca
oob_tcp_if_include
$subnet.0/24
--mca
oob_tcp_keepalive_time
2
--mca
oob_tcp_keepalive_intvl
1
--mca
oob_tcp_keepalive_probes
3
EOF
}

link() {
	case $2 in
	up | down) ip -n "$prefix$1" link set eth0 "$2" ;;
	*) echo "hosts.sh link: $2: accepted are up and down" >&2; exit 2 ;;
	esac
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
up) up "$@" ;;
down) down ;;
exec) on "$@" ;;
agent) agent "$@" ;;
hostfile) hostfile ;;
flags) flags ;;
link) link "$@" ;;
mpirun)
	hosts
	mapfile -t opts < <(flags)
	hostfile >"$state/hostfile"
	on 1 mpirun "${opts[@]}" --hostfile "$state/hostfile" "$@"
	;;
bench) exec "$(dirname "$self")/hosts-bench.sh" "$@" ;;
hsdp) exec "$(dirname "$self")/hosts-hsdp.sh" "$@" ;;
*)
	echo "usage: bench/hosts.sh up N [--rate RATE] [--private DIR] | down | exec K CMD... | agent HOST CMD | hostfile | flags | mpirun ARGS... | link K up|down | bench | hsdp" >&2
	exit 2
	;;
esac
