#!/bin/sh
# The image's entrypoint: runs the command; in a container started as root (the sandbox workers:
# worker-verify, worker-eval, worker-audit in docker-compose.yml) it first prepares what
# bubblewrap needs inside a container, then gives up CAP_SYS_ADMIN before the command starts.
#
# Why (docs/controlplane.md, "Sandboxes in containers"): a sandbox mounts a fresh /proc for its
# own pid namespace from inside a new user namespace, and the kernel allows that only when a
# procfs is already fully visible in the mount namespace; Docker masks parts of the container's
# /proc (/proc/kcore, /proc/sys, ...), so it is not. A second procfs with only the process
# directories (subset=pid: no /proc/sys, no kcore; the same entries as the container's /proc)
# under a root-only directory satisfies the kernel. bubblewrap's --disable-userns writes
# /proc/sys/user/max_user_namespaces of the sandbox's own user namespace: only /proc/sys/user is
# made writable (its limits need CAP_SYS_RESOURCE in the namespace they limit, which the worker
# does not hold in the container's); the rest of /proc/sys stays read-only.
set -eu
if [ "$(id -u)" = 0 ] && [ "${TEMPER_SANDBOX_BACKEND:-bwrap}" != docker ]; then
  if ! mountpoint -q /run/temper/proc 2>/dev/null; then
    mkdir -p /run/temper && chmod 0700 /run/temper && mkdir -p /run/temper/proc
    if mount -t proc -o nosuid,nodev,noexec,subset=pid proc /run/temper/proc 2>/dev/null \
       && mount --bind /proc/sys/user /proc/sys/user \
       && mount -o remount,bind,rw,nosuid,nodev,noexec /proc/sys/user; then
      :
    else
      echo "entrypoint: cannot prepare bubblewrap (the container needs cap_add SYS_ADMIN, seccomp and" \
           "apparmor unconfined; kernel 5.8+): sandboxes will not start" >&2
    fi
  fi
  # Nothing after this point needs CAP_SYS_ADMIN: the sandboxes are unprivileged user namespaces.
  exec setpriv --bounding-set=-sys_admin -- "$@"
fi
exec "$@"
