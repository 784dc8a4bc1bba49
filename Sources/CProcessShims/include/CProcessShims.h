#ifndef IMGATEWAY_CPROCESSSHIMS_H
#define IMGATEWAY_CPROCESSSHIMS_H

#include <spawn.h>
#include <sys/types.h>

/* glibc declares the functions behind these only for _GNU_SOURCE, which Swift's Glibc
   module does not define (and a header that did would clash with it): they are
   implemented in CProcessShims.c. */

/// `posix_spawn_file_actions_addclosefrom_np` (glibc 2.34): the child closes every
/// descriptor from `from` up, whether or not it is close-on-exec.
int cproc_spawn_addclosefrom(posix_spawn_file_actions_t *actions, int from);

/// `posix_spawn_file_actions_addchdir_np` (glibc 2.29): the child changes directory.
int cproc_spawn_addchdir(posix_spawn_file_actions_t *actions, const char *path);

/// A pipe whose two ends are close-on-exec (`pipe2` with `O_CLOEXEC`). Returns 0, or -1
/// with errno.
int cproc_pipe_cloexec(int fds[2]);

/// Starts `path` with `argv` and `envp` as posix_spawn would with the settings of
/// ChildProcess (/dev/null as stdin, `output_fd` as stdout and stderr, no other descriptor,
/// default signal handlers, an empty signal mask, `directory` if not NULL), in a process
/// group of its own (a terminal's signals are for us, who stop it), and with
/// `death_signal` sent to it when this process ends, however it ends (PR_SET_PDEATHSIG,
/// set by a thread that lives as long as the process). Returns 0 and the pid, or an errno.
int cproc_spawn_with_death_signal(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                                  int output_fd, const char *directory, int death_signal);

#endif
