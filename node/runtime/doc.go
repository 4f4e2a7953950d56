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
// that maps only its own uid and gid (to 0). The shim then, in this order:
//
//   - makes every mount private, so nothing it does reaches the node;
//   - makes every mount read-only (per mount, never the filesystem itself);
//   - covers each [Spec.Hide] path: a directory with an empty read-only
//     tmpfs of mode 000, anything else with an empty read-only file of
//     mode 000. Reading fails with "permission denied", listing shows
//     nothing. The node hides its key, its API token, its store and the
//     whole jobs directory, for instance;
//   - covers every ancestor of WorkDir or CheckpointDir that the job's user
//     could not search anyway, the same way;
//   - mounts a private writable tmpfs on /tmp and /dev/shm (sized
//     MemoryBytes when set), instead of the host's shared ones;
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
// environment reaches the job.
//
// The job's stdout and stderr go through pipes to Spec.Stdout and
// Spec.Stderr (one pipe when they are the same writer, so the order
// holds). When the job's main process exits, whatever it left running in
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
//   - The network is the host's: jobs reach localhost services, the local
//     network and any cloud metadata endpoint.
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
//     read the node's /proc entries, but it can read every root-owned file
//     that is not hidden, and services that trust uid 0 over a socket
//     (D-Bus, systemd, docker.sock) still do. That is not a security
//     boundary: set RunAs on a root node.
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
// (podman), RunAs as --user. The environment goes through an env file
// readable by the node only, not through argv. The Process is the client:
// Pause and Resume are "pause"/"unpause", Stop is "stop -t grace" then
// "kill"; CPU time and memory in the Result are the client's. Hide does
// not apply (the container sees only its image and the two volumes). New
// fails with [ErrUnavailable] when the binary is missing or "<bin> info"
// fails. If the node dies, the container outlives the client: remove
// leftover gpumesh-* containers at start-up.
package runtime
