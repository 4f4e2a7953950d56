// Package runtime runs a renter's job on a supplier node: as a sandboxed
// process ("process", the default) or in a container ("docker",
// "podman").
//
// A [Runtime] starts one attempt of a job from a [Spec] and returns a
// [Process] to pause, resume, stop and wait for. [New] picks the runtime
// by name. Every binary that starts jobs must call [MaybeShim] first thing
// in main (and in the TestMain of every package whose tests start jobs).
//
// # The process runtime
//
// Start re-executes the node's own binary (/proc/self/exe) as a shim, with
// nothing in its environment but a marker; the configuration comes over a
// pipe. The child starts in a new process group, with the parent-death
// signal set to SIGKILL (a job whose node died is no longer metered), in
// a new mount namespace and a new PID namespace, of which the shim is the
// init (pid 1); a node that is not root also gets a new user namespace
// that maps only its own uid and gid (to 0), and with Options.Net a new
// network namespace (see "The job's network"). The shim then, in this
// order:
//
//   - makes every mount private, so nothing it does reaches the node;
//   - makes every mount read-only and nodev (per mount, never the
//     filesystem itself), and fails unless every cgroup and cgroup2 mount
//     is then read-only (statfs), as a job running as uid 0 could
//     otherwise move itself out of its cgroup and its device filter;
//   - mounts a private /dev (see "The job's devices");
//   - covers each [Spec.Hide] path: a directory with an empty read-only
//     tmpfs of mode 000, anything else with an empty read-only file of
//     mode 000. Reading fails with "permission denied", listing shows
//     nothing. The node hides its key, its API token, its store and the
//     whole jobs directory, for instance;
//   - covers every ancestor of WorkDir or CheckpointDir that the job's user
//     could not search anyway, the same way;
//   - mounts a private writable tmpfs on /tmp and /dev/shm (sized
//     MemoryBytes when set), instead of the host's shared ones, and makes
//     the job's /dev read-only;
//   - puts WorkDir and CheckpointDir back, writable, where the job expects
//     them: both were opened before anything was covered, and a hidden
//     directory above them (the jobs directory) gets the way down to them
//     recreated inside its tmpfs. So a Hide entry may contain WorkDir; one
//     that equals it is an error;
//   - mounts a read-only /proc of the job's PID namespace over the host's:
//     the job sees its own processes only (ps, /proc), and pid 1 is the
//     shim. If that mount fails, Start fails;
//   - re-executes the binary once more as the exec stage (pid 2, the job's
//     main process to be) and stays as the namespace's init: it reaps
//     orphans, turns the node's pause, resume and stop (sent over a pipe,
//     so their order holds) into SIGSTOP, SIGCONT and SIGTERM+SIGCONT to
//     every process of the namespace, setsid escapees included, and when
//     the job's main process has exited it reports how (exit code or
//     signal) and exits, upon which the kernel kills every process left in
//     the namespace. The exec stage:
//   - sets the rlimits (below), PR_SET_NO_NEW_PRIVS, empties the capability
//     bounding set, changes to RunAs (setgroups, setgid, setuid) when set,
//     drops every capability, sets the parent-death signal again (a change
//     of user clears it), changes to WorkDir and marks every descriptor
//     above stderr close-on-exec;
//   - execs argv[0], looked up in the job's PATH. When that fails it prints
//     why on stderr and exits 127, like a shell.
//
// The job's environment is exactly PATH (a fixed default), HOME=WorkDir,
// LANG=C.UTF-8 and TMPDIR=WorkDir/tmp, then the renter's Env (which may
// replace PATH, LANG and TMPDIR), then HOME again, CUDA_VISIBLE_DEVICES
// (the GPUs, comma-joined; "" for none), CHECKPOINT_DIR, JOB_ATTEMPT and
// GPUMESH_JOB_ID, which the renter cannot change. Nothing of the node's
// environment reaches the job. The GPU variables are the node's in every
// runtime: Start refuses (ErrInvalidSpec) an Env that sets
// CUDA_VISIBLE_DEVICES (the job's command may still narrow it) or an
// NVIDIA_* variable, which the NVIDIA container toolkit reads to choose a
// container's GPUs and device nodes (see Containers), but for three that
// add no device: NVIDIA_DRIVER_CAPABILITIES (a comma list of all,
// compute, compat32, display, graphics, ngx, utility and video),
// NVIDIA_REQUIRE_* and NVIDIA_DISABLE_REQUIRE.
//
// The job's stdout and stderr go through pipes to Spec.Stdout and
// Spec.Stderr (one pipe when they are the same writer, so the order
// holds); its stdin is /dev/null, or a pipe fed from Spec.Stdin. With
// Spec.TTY all three are instead the slave of a pseudo-terminal whose
// master the node reads and writes, and the job leads a session with it
// as its controlling terminal (in a PID namespace the init starts the
// job with setsid and TIOCSCTTY, so the terminal's signals reach the
// job's foreground group and never the init); Terminal.Resize sets its
// size (TIOCSWINSZ on the master). When the job's main process exits, whatever it left running in
// its PID namespace (and group, and cgroup) is killed, the pipes are
// drained and Done closes: a process the job started, setsid or
// double-forked daemons included, never outlives it. Stop kills the init
// after its grace, which kills the namespace the same way. Result is the
// main process's exit code or signal, as the init reports it (or the
// init's own end when it was killed: SIGKILL after Stop's grace), with
// wait4's user+sys CPU time of the whole tree and the largest resident
// set.
//
// If the shim cannot set the sandbox up, Start fails and nothing runs. A
// node that is not root and cannot create a user namespace (disabled, or
// restricted as on Ubuntu 24.04) has neither a mount nor a PID namespace
// for its jobs: it refuses them with ErrUnavailable, unless
// Options.AllowUnsandboxed is set: then it runs them without namespaces,
// logging a warning, Hide protects nothing, the job sees every process,
// and (without cgroup v2) a process that leaves the job's process group
// survives the job; Pause, Resume and Stop then signal the group.
//
// # The job's devices
//
// A job sees and can open only the device nodes of the GPUs its lease
// names, whatever its environment says (CUDA_VISIBLE_DEVICES only picks
// among them). In its mount namespace /dev is a small tmpfs, read-only
// once made, holding nothing of the host's but binds of:
//
//   - null, zero, full, random, urandom and tty;
//   - each of Spec.GPUDevices (the executor's /dev/nvidia<minor> of each
//     leased GPU, see job.DeviceNodes) at /dev/<base name>, and, for a job
//     with any, the driver's control nodes that Options.DeviceDir (default
//     /dev) has: nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset,
//     and the nvidia-caps directory. A job without GPUDevices (no GPU, or
//     simulated ones) gets no NVIDIA node at all;
//
// with a devpts of its own on /dev/pts (newinstance) and ptmx linked to
// pts/ptmx, an empty shm for the private /dev/shm, and fd, stdin, stdout
// and stderr linked to /proc/self/fd. The shim opens every source before
// anything is covered, so a node under /tmp or a hidden path binds too.
// Those binds
// (read-only, nosuid, noexec) and the devpts are the only mounts of the
// job's namespace where a device opens: every other mount is nodev, the
// tmpfs of /dev included, so a device node anywhere else fails to open
// (EACCES), filter or not: the host's /dev reached by another path, a
// second devtmpfs, a chroot's /dev, a node planted in a directory the
// job reaches.
//
// The host's /dev/pts is never given to a job: where the kernel refuses
// a job a devpts of its own, the node logs so once and starts that job,
// and every later one, without /dev/pts and ptmx (no terminals), and
// their filter allows no pts (136:*) and no ptmx.
//
// A device filter then refuses every other device node where devices do
// open (a node the sandbox missed in a directory the job's /dev binds
// whole, nvidia-caps; a mount the shim could not make nodev, which it
// warns of): the job may read and write only the character devices
// of its /dev, by major:minor as the node saw them when it planned the
// job, plus ptmx (5:2) and the pts (136:*) of its devpts; nothing else
// opens (EPERM),
// block devices and mknod included. The filters, all that the machine
// has unless Options.DeviceFilter picks one ("bpf", "v1") or none
// ("off"):
//
//   - cgroup v2: a BPF_PROG_TYPE_CGROUP_DEVICE program (built with
//     cilium/ebpf's asm, as runc builds its own) attached with
//     BPF_F_ALLOW_MULTI to the job's cgroup before the shim is started
//     into it; it stays as long as the cgroup, and programs of ancestor
//     cgroups still run (each can refuse). Where jobs get it, a job whose
//     cgroup cannot be made, or whose shim cannot be started in it, is
//     refused (ErrUnavailable, saying so), never run without its filter;
//   - cgroup v1: a cgroup of the job's own in the devices hierarchy
//     (gpumesh/job-<id>-<attempt> below the node's own), with devices.deny
//     "a" and a devices.allow line per rule; the node moves the shim into
//     it before the shim reads its config, so before anything of the job
//     runs, and removes it when the job has ended.
//
// New logs which filters jobs get, or that they get none and why (not
// root, no cgroup v2 for jobs and no v1 devices controller): then the
// private /dev still holds only the job's own nodes, every other mount is
// nodev, and the job, without CAP_MKNOD, cannot make nodes.
//
// # The job's network
//
// With Options.Net set, the shim also starts in a network namespace of
// the job's own, in which it brings lo up before anything of the job
// runs. A node that is not root has the shim make it (CLONE_NEWNET). A
// node that is root makes it first, with a veth pair, and forks the shim
// in it (from a locked thread that enters it and comes back), so the
// network is ready before the job starts; such a ready network is made
// ahead, in the background, for the next jobs (NetConfig.Warm, default
// 2: a pool that one loop fills up again after each start, where a job
// finding none makes its own). A ready network is a namespace held only
// by the node's descriptor (no name in /run/netns), with its link: it
// serves one job and goes with that job, never handed out twice, so no
// job sees what another left in its namespace. Close removes the ones
// not handed out; those of a node that dies go with its descriptors
// (the kernel removes a namespace, and its veth pair, when nothing holds
// it). The job's network:
//
//   - the job's end is eth0 in its namespace, with the second address of a
//     /30 of NetConfig.Pool (default 10.213.0.0/16) and a default route via
//     the first, which the node's end has. The /30 is the first one no
//     interface of the node's namespace holds an address in, chosen and
//     assigned under a machine-wide lock (flock on
//     $XDG_RUNTIME_DIR/gpumesh-jobnet.lock, else /run/gpumesh-jobnet.lock),
//     so several nodes on one machine never give two jobs one address. The node's end lives in
//     the node's namespace and is named gmj + 8 hex digits. IPv6 is
//     disabled on both ends: the job has no IPv6 address but ::1, so no
//     IPv6 route out;
//   - when the job ends, however it ends, the link is removed with its
//     addresses, and the node lets the namespace go (the kernel removes
//     the link with it, if the node cannot).
//
// What the node changes in its own namespace: net.ipv4.ip_forward is set
// to 1 (and left so) unless it is 1 already (the package's sysctl.d sets
// it at boot, so a unit that may not write /proc/sys runs jobs), and the nftables table "inet gpumesh_jobs" exists
// while at least one job link (gmj*) does: installed, under the lock, by
// the first job (or ready network) that finds it missing, and removed,
// under the lock, by the end of a job (or Close) that leaves no gmj*
// link in the namespace: with ready networks it stays while the node
// runs. Several
// nodes on one machine share it (the last to install it sets AllowLAN). Its rules, at priority filter - 10,
// so that a later accept elsewhere does not undo them:
//
//   - input: packets from a gmj* link are dropped unless they belong to a
//     connection the node opened (ct state established,related). The node
//     dials into its jobs; a job reaches none of the node's addresses (its
//     gateway, the node's public and LAN addresses, and 127.0.0.0/8, which
//     the kernel drops anyway as martian), so none of its services;
//   - forward: gmj* to gmj* is dropped (jobs cannot reach each other), and
//     so is anything from a gmj* link to 127.0.0.0/8, 169.254.0.0/16 (cloud
//     metadata), ::1 and fe80::/10; unless NetConfig.AllowLAN, also to the
//     private networks 10/8, 172.16/12, 192.168/16, 100.64/10 and fc00::/7;
//   - postrouting: what leaves the pool for another link is masqueraded,
//     so a job reaches the internet from the node's address.
//
// Another firewall that drops forwarded traffic (docker's FORWARD policy,
// for one) also drops the jobs' outbound traffic: allow the pool there.
// At start-up New removes a table that a node which died left behind, if
// no gmj* link is left. Links are never leftovers: a job's pair goes
// with its namespace, which goes with the job, which dies with its node;
// a ready network's pair goes with the node's descriptor of it.
//
// A job keeps the host's /etc/resolv.conf unless NetConfig.DNS is set: the
// shim then mounts one naming those servers over it, read-only. A
// resolver on loopback (systemd-resolved's 127.0.0.53) or, without
// AllowLAN, on a private address is unreachable from jobs: New logs that
// jobs will not resolve names, and NetConfig.DNS is the fix.
//
// The node reaches a job's ports with [PortDialer], which every Process
// of the process runtime implements: DialPort enters the job's network
// namespace (held open from the start) on a locked OS thread, connects
// to 127.0.0.1:port there, so a server bound to loopback only is
// reachable, and returns; the socket stays in the job's namespace. It
// fails once the job has ended, and for a job without a namespace.
//
// A node that is not root gets the same namespace inside the job's user
// namespace, with loopback only: no veth, no outbound traffic, nothing
// on the host changed (New logs so). It cannot enter that namespace
// (setns needs CAP_SYS_ADMIN in the node's own user namespace), so
// DialPort fails. [NetworkIsolation] returns nil only when jobs get a
// network of their own and the node can reach their ports: the process
// runtime with Options.Net on a root node, and docker and podman there
// too (see Containers).
//
// # The job's cluster network
//
// A job started with [Spec.Cluster] is one member of its renter's
// cluster: it gets an address of the cluster's prefix, and every TCP
// connection it opens to another address of the prefix is handed to the
// node (ClusterNet.Connect), which carries it to that member's node. It
// needs the process runtime with Options.Net on a root node
// ([ClusterSupport]); elsewhere, docker and podman included, Start
// refuses it (ErrInvalidSpec). While the shim waits for its config,
// after eth0, the node sets up in the job's network namespace:
//
//   - gm0 ([ClusterIfName]), a link that carries nothing (dummy, or ifb
//     where the kernel has no dummy driver), with ClusterNet.Addr in
//     ClusterNet.Prefix, up; IPv6 off;
//   - a TCP listener of the node on 127.0.0.1 of the job's namespace
//     (made there on a locked thread, as DialPort's sockets are);
//   - the nftables table "ip gpumesh_cluster": in an output nat chain,
//     TCP to the prefix but not to Addr is redirected to the listener;
//     in an output filter chain, anything else to the prefix but Addr
//     (UDP, ICMP) is rejected (the sender gets EPERM).
//
// For each connection the listener accepts, the node reads where the
// job dialled it (SO_ORIGINAL_DST) and calls Connect with it in a
// goroutine of its own; a connection that was not redirected (the job
// dialled the listener's port itself) or whose destination is not
// another address of the prefix is closed at once, and so is one beyond
// 1024 in Connect at once. A job may listen on Addr (or 0.0.0.0) on any
// port, kernel-chosen ones included: the node reaches it with
// [ClusterDialer] (DialCluster connects to Addr:port from inside the
// namespace), which is how the receiving node delivers a member's
// connection. Nothing leaves the namespace on gm0: jobs on one node never
// see each other's cluster addresses (every cluster may use the same
// prefix), and the host's forward rules (which drop 100.64/10) are left
// as they are. When the job ends the listener is closed and every
// connection still in Connect is closed too (Connect must then return);
// the link and table go with the namespace.
//
// The job also gets a UTS namespace of its own with ClusterNet.Hostname
// as its hostname (set by the shim), and an /etc/hosts mounted
// read-only over the host's, as resolv.conf is, naming localhost, the
// job's own hostname and ClusterNet.Hosts. Its environment ends with
// GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and TP_SOCKET_IFNAME set to
// gm0, over any value of the renter's (the renter may set them; the
// node's win), so that gloo, NCCL and tensorpipe bind the cluster
// address.
//
// # Limits
//
// [Limits] become rlimits, which every process of the job inherits and
// which it cannot raise: RLIMIT_AS (MemoryBytes; not for jobs with GPUs,
// since CUDA reserves far more address space than it uses), RLIMIT_CPU
// (CPUSeconds; SIGXCPU at the limit, SIGKILL a second later, counted per
// process), RLIMIT_NPROC (Procs; only with RunAs, and counted over every
// process of that user), RLIMIT_FSIZE (FileBytes; SIGXFSZ on a larger
// write), RLIMIT_NOFILE (OpenFiles, 1024 by default) and RLIMIT_CORE 0.
//
// With cgroup v2 (Options.CgroupRoot, default /sys/fs/cgroup, has
// cgroup.controllers, is a cgroup2 mount and is writable) each attempt
// also runs in <root>/gpumesh/job-<id>-<attempt>, which it is started
// directly into (clone3 CLONE_INTO_CGROUP). That adds memory.max (with
// swap off) for the whole tree, GPU jobs included, and pids.max (Procs
// plus 16 for the threads of the shim, which stays as the job's init);
// Pause also freezes the cgroup, the end of a job kills everything in it,
// the CPU time counts every process the job ever had, and the cgroup is
// removed afterwards. Without cgroup v2 the runtime logs why and relies
// on rlimits and the PID namespace.
//
// The supplier's executor (package job) fills limits a spec leaves at 0
// from the supplier's defaults, refuses a spec above its maxima, sets
// FileBytes at most the disk limit, and measures the working and
// checkpoint dirs itself (see job.Limits).
//
// # What the sandbox does not protect
//
//   - The kernel and the GPU driver are shared: a kernel or driver exploit
//     is an escape. GPU memory is not cleared by this package.
//   - A job opens only its own GPUs' nodes (see "The job's devices"), but
//     without a device filter (no cgroup v2 cgroup for jobs and no cgroup
//     v1 devices controller, or a node that is not root) a device node
//     where devices open in its namespace still does: one the host's
//     driver (or a user with CAP_MKNOD) adds to a directory its /dev binds
//     whole (nvidia-caps), or one on a mount the shim could not make nodev
//     (it warns). New logs when jobs have no filter. An
//     unsandboxed job (no namespaces) sees the host's whole /dev and
//     every GPU; only a device filter, where there is one, confines it.
//     A GPU job gets every node of nvidia-caps: the MIG instances of its
//     GPUs are not told apart (leases are of whole GPUs). A control node
//     the driver makes on first use (nvidia-uvm) is bound only if it
//     exists when the job starts: the job cannot make it.
//   - Without Options.Net the network is the host's: jobs reach localhost
//     services, the local network and any cloud metadata endpoint. With
//     it, see "The job's network" for what a job can still reach: the
//     internet, through the node's NAT (and the LAN with AllowLAN).
//   - Jobs that run as the same user share that user's files outside
//     their own dirs, and RLIMIT_NPROC counts all their processes
//     together; they cannot see or signal each other's processes (each
//     job has its own PID namespace and /proc). Run concurrent jobs of
//     different renters as different users where that matters.
//   - Without cgroup v2's pids controller the process limit is
//     RLIMIT_NPROC, which holds only with RunAs (not uid 0) and counts
//     every process of that user, so one job can use up what all jobs of
//     that user may have. Without the memory controller, GPU jobs have
//     no memory limit, and the private /tmp and /dev/shm (tmpfs of up to
//     MemoryBytes each) are RAM beside RLIMIT_AS.
//   - A job with RunAs "" on a root node runs as uid 0 without
//     capabilities. It cannot undo the mounts, write the filesystem or
//     read the node's /proc entries, nor leave its cgroup (and its device
//     filter) by a root-owned cgroup.procs: the start fails where a
//     cgroup mount would stay writable in its view. But it can read every
//     root-owned file that is not hidden, and services that trust uid 0
//     over a socket (D-Bus, systemd, docker.sock) still do. That is not a
//     security boundary: set RunAs on a root node.
//   - Files readable by the job's user outside Hide stay readable (the
//     filesystem is read-only, not invisible).
//   - KillGroup (a restarted node cleaning up) kills the job's init, and
//     with it the whole PID namespace; an unsandboxed job's setsid
//     escapees are missed.
//
// # Containers
//
// "docker" and "podman" run Spec.Image with "<bin> run --rm" named
// gpumesh-<id>-<attempt>: WorkDir on /work (the cwd and HOME),
// CheckpointDir on /checkpoint, all capabilities dropped,
// no-new-privileges, the limits as --memory, --pids-limit and --ulimit,
// the GPUs as --gpus device=... (docker) or CDI devices nvidia.com/gpu=...
// (podman; a simulated GPU, "GPU-sim-...", is no device) through the
// NVIDIA container toolkit, or with Options.GPUMode "devices" (an engine
// without the toolkit) as a --device of each of Spec.GPUDevices and of
// the control nodes of Options.DeviceDir, at the same places below /dev
// as the process runtime puts them, RunAs as --user. Either way the
// engine gives the container a /dev of its own holding only those GPUs
// and a device cgroup that lets it open only its own nodes. The environment goes through an env file readable by the node
// only, not through argv.
//
// The NVIDIA toolkit gives a container the GPUs that NVIDIA_VISIBLE_DEVICES
// names in its environment, the image's ENV included (every nvidia/cuda
// image has NVIDIA_VISIBLE_DEVICES=all), wherever the toolkit runs: as
// docker's default runtime ("nvidia"), or as a hook of either engine. So
// the env file always sets it, over the image's: in GPUMode "toolkit" on
// docker, to the GPUs of --gpus (for which docker itself appends the same
// NVIDIA_VISIBLE_DEVICES to the container's environment); everywhere else
// to "void", which the toolkit takes as no GPU at all: a job without real
// GPUs, podman (its GPUs come by CDI, whose NVIDIA spec, from nvidia-ctk
// cdi generate, sets "void" too) and GPUMode "devices" (its --device
// flags). The toolkit's variables that add other nodes
// (NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES,
// NVIDIA_IMEX_CHANNELS, NVIDIA_GDS, NVIDIA_MOFED, NVIDIA_NVSWITCH,
// NVIDIA_GDRCOPY) are set empty, which it takes as none; the renter may
// set none of them (see the job's environment above).
//
// The Process is the client:
// Pause and Resume are "pause"/"unpause", Stop is "stop -t grace" then
// "kill"; CPU time and memory in the Result are the client's. Hide does
// not apply (the container sees only its image and the two volumes). New
// fails with [ErrUnavailable] when the binary is missing or "<bin> info"
// fails. If the node dies, the container outlives the client: remove
// leftover gpumesh-* containers at start-up.
//
// With Options.Net on a root node, containers get the job network too,
// never the engine's: the same veth pair, /30, rules and NAT as above,
// and DialPort through the namespace. podman's container joins a
// namespace the node made (on a locked thread, with lo up), linked and
// filtered before "podman run" starts, by --network ns:/proc/<node
// pid>/fd/<n>: the node holds the namespace open by that descriptor, so
// nothing of it outlives the node and its first packet is already
// filtered. docker cannot join a namespace by path: its container runs
// with --network none, and the node links the namespace of the
// container's process as soon as "docker inspect" reports it (by the ID
// the client wrote to its --cidfile, so never another container of the
// same name), so a docker job has loopback only for its first moments
// (and one that ends sooner keeps its result). NetConfig.DNS becomes --dns. Elsewhere (not
// root, or the job network could not be set up, which New logs)
// containers keep the engine's network, and NetworkIsolation says so.
package runtime
