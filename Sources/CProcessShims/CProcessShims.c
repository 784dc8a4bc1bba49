#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include "CProcessShims.h"

int cproc_spawn_addclosefrom(posix_spawn_file_actions_t *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
}

int cproc_spawn_addchdir(posix_spawn_file_actions_t *actions, const char *path) {
    return posix_spawn_file_actions_addchdir_np(actions, path);
}

int cproc_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}

/* --- Spawning with a parent-death signal ------------------------------------------------
   posix_spawn cannot set PR_SET_PDEATHSIG, so these children are forked and exec'd by hand.
   The signal goes to the child when the thread that forked it ends, not the process: a
   thread of Swift's pools may end when idle, so every such child is forked by one thread
   that lives as long as the process (started on first use, never joined). */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

struct cproc_request {
    const char *path;
    char *const *argv;
    char *const *envp;
    int output_fd;
    const char *directory;
    int death_signal;
    pid_t pid;
    int error;
    int done;
};

static pthread_mutex_t cproc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cproc_changed = PTHREAD_COND_INITIALIZER;
static struct cproc_request *cproc_pending = NULL;
static pthread_once_t cproc_once = PTHREAD_ONCE_INIT;
static int cproc_thread_error = 0;

/* Closes every descriptor from `from` up but `keep` (close_range, or one by one). */
static void cproc_close_from(int from, int keep) {
    if (keep >= from) {
        if (keep > from && syscall(SYS_close_range, from, keep - 1, 0) != 0) {
            for (int fd = from; fd < keep; fd++) close(fd);
        }
        if (syscall(SYS_close_range, keep + 1, ~0U, 0) != 0) {
            long max = sysconf(_SC_OPEN_MAX);
            for (long fd = keep + 1; fd < max; fd++) close((int)fd);
        }
    } else if (syscall(SYS_close_range, from, ~0U, 0) != 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (long fd = from; fd < max; fd++) close((int)fd);
    }
}

/* Runs in the forked child: async-signal-safe calls only, then exec. An error before the
   exec is written to `report` (close-on-exec: an exec that works closes it unwritten). */
static void cproc_child(struct cproc_request *request, pid_t parent, int report) {
    int error = 0;
    int null;
    struct sigaction defaults;
    memset(&defaults, 0, sizeof defaults);
    defaults.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &defaults, NULL);
    }
    sigset_t empty;
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, NULL);
    /* A process group of its own: a terminal's SIGINT or SIGHUP is for us, who then stop it. */
    if (setpgid(0, 0) != 0) { error = errno; goto failed; }
    if (prctl(PR_SET_PDEATHSIG, request->death_signal) != 0) { error = errno; goto failed; }
    /* The parent may have died before the prctl: then no signal comes. */
    if (getppid() != parent) { error = ESRCH; goto failed; }
    null = open("/dev/null", O_RDONLY);
    if (null < 0) { error = errno; goto failed; }
    if (dup2(null, 0) < 0 || dup2(request->output_fd, 1) < 0 || dup2(request->output_fd, 2) < 0) { error = errno; goto failed; }
    if (request->directory != NULL && chdir(request->directory) != 0) { error = errno; goto failed; }
    cproc_close_from(3, report);
    execve(request->path, request->argv, request->envp);
    error = errno;
failed:
    while (write(report, &error, sizeof error) < 0 && errno == EINTR) {}
    _exit(127);
}

static void cproc_run(struct cproc_request *request) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) { request->error = errno; return; }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) cproc_child(request, parent, report[1]);
    close(report[1]);
    if (pid < 0) { request->error = errno; close(report[0]); return; }
    int error = 0;
    ssize_t count;
    while ((count = read(report[0], &error, sizeof error)) < 0 && errno == EINTR) {}
    close(report[0]);
    if (count == (ssize_t)sizeof error) {
        /* The exec did not happen: reap the child, report why. */
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        request->error = error;
        return;
    }
    request->pid = pid;
}

static void *cproc_spawner(void *unused) {
    (void)unused;
    pthread_mutex_lock(&cproc_lock);
    for (;;) {
        while (cproc_pending == NULL) pthread_cond_wait(&cproc_changed, &cproc_lock);
        struct cproc_request *request = cproc_pending;
        pthread_mutex_unlock(&cproc_lock);
        cproc_run(request);
        pthread_mutex_lock(&cproc_lock);
        request->done = 1;
        cproc_pending = NULL;
        pthread_cond_broadcast(&cproc_changed);
    }
    return NULL;
}

static void cproc_start_spawner(void) {
    pthread_t thread;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    /* The spawner blocks every signal: they are the process's business, not its. */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    cproc_thread_error = pthread_create(&thread, &attributes, cproc_spawner, NULL);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    pthread_attr_destroy(&attributes);
}

int cproc_spawn_with_death_signal(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                                  int output_fd, const char *directory, int death_signal) {
    pthread_once(&cproc_once, cproc_start_spawner);
    if (cproc_thread_error != 0) return cproc_thread_error;
    struct cproc_request request = {
        .path = path, .argv = argv, .envp = envp, .output_fd = output_fd,
        .directory = directory, .death_signal = death_signal, .pid = 0, .error = 0, .done = 0,
    };
    pthread_mutex_lock(&cproc_lock);
    while (cproc_pending != NULL) pthread_cond_wait(&cproc_changed, &cproc_lock);
    cproc_pending = &request;
    pthread_cond_broadcast(&cproc_changed);
    while (!request.done) pthread_cond_wait(&cproc_changed, &cproc_lock);
    pthread_mutex_unlock(&cproc_lock);
    if (request.error != 0) return request.error;
    *pid = request.pid;
    return 0;
}
