/* The confining spawn shim, compiled: the same program as _shim.py, without an interpreter.
 *
 * Run as ``_shim STEP... -- PROGRAM ARGS...``.  It does, in order, what its steps say, then
 * execve's the program in the same process (the pid the supervisor spawned is the agent's).
 * The steps, their order, the skip rules, the exit statuses and the one line on stderr are
 * those of _shim.py, whose docstring is the reference:
 *
 *   procs=PATH                  enter a cgroup (write this pid into PATH, a cgroup.procs)
 *   ns=cgroup | ns=cgroup,mount a cgroup namespace (and a private mount namespace)
 *   ro=PATH                     PATH and every mount below it read-only (skipped where absent)
 *   view=KIND:OPTIONS:POINT     the host's mount at POINT detached; a fresh cgroup2 / cgroup
 *                               (v1 controllers OPTIONS) mount there, or nothing (hide)
 *   shm=POINT                   a fresh tmpfs on POINT (skipped where it is not a directory)
 *   drop=N,N,...                capabilities out of the bounding set; inheritable, ambient cleared
 *   pdeathsig=PPID              PR_SET_PDEATHSIG(SIGKILL); the parent PPID already gone: die now
 *   landlock=HANDLED:SCOPED     no_new_privs, a ruleset, a rule per rule=RIGHTS:PATH step (a path
 *                               that cannot be opened grants nothing), restrict_self
 *
 * A step that fails ends it with status 125 and one line on stderr naming the step and the
 * errno; an exec that fails, 127 where the program is not there (ENOENT), else 126.
 *
 * The program gets exactly the environment this process was given (``environ``, untouched: no
 * locale is coerced here), and a name without a slash is looked for as os.execvpe does: along
 * the environment's PATH (``/bin:/usr/bin`` without one), the error reported being the first
 * that is not "not there" (ENOENT, ENOTDIR), else the last.
 *
 * It reads nothing but its argv and environment, allocates nothing but one path buffer, and
 * links nothing but libc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

#define LANDLOCK_RULE_PATH_BENEATH 1
#define MOUNT_ATTR_RDONLY_ 1
/* The rights Landlock accepts on a rule for a file that is not a directory. */
#define FILE_RIGHTS ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14) | (1ULL << 15))
#define DEFAULT_PATH "/bin:/usr/bin" /* os.defpath: where execvp looks without a PATH */

extern char **environ;

struct ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

struct mount_attr_ {
    uint64_t attr_set;
    uint64_t attr_clr;
    uint64_t propagation;
    uint64_t userns_fd;
};

/* One line on stderr, in one write: "subagent spawn shim: WHAT[ DETAIL...]: errno N". */
static void say(const char *what, const char *detail, const char *rest, int error) {
    char line[512];
    int n = snprintf(line, sizeof line, "subagent spawn shim: %s%s%s: errno %d\n", what, detail ? detail : "",
                     rest ? rest : "", error);
    if (n > (int)sizeof line - 1) { /* a long detail: cut, the line still ends as it must */
        n = snprintf(line, sizeof line, "subagent spawn shim: %s: errno %d\n", what, error);
    }
    if (n > 0) {
        ssize_t written = write(2, line, (size_t)n);
        (void)written;
    }
}

static _Noreturn void fail(const char *step) {
    say(step, NULL, NULL, errno);
    _exit(125);
}

static _Noreturn void failed_kind(const char *before, const char *kind, const char *after) {
    say(before, kind, after, errno);
    _exit(125);
}

static _Noreturn void malformed(void) {
    say("a malformed step", NULL, NULL, EINVAL);
    _exit(125);
}

/* A decimal number that is all of ``text`` up to ``end`` (or its NUL). */
static long long number(const char *text, const char *end) {
    if (end == NULL) {
        end = text + strlen(text);
    }
    if (text == end) {
        malformed();
    }
    long long value = 0;
    for (const char *p = text; p < end; p++) {
        if (*p < '0' || *p > '9' || value > (LLONG_MAX - 9) / 10) {
            malformed();
        }
        value = value * 10 + (*p - '0');
    }
    return value;
}

/* The file type bits of ``path`` (followed), or -1 where it cannot be seen. */
static int mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int)(st.st_mode & S_IFMT) : -1;
}

static void enter(const char *path) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        fail("entering a cgroup");
    }
    char text[24];
    int n = snprintf(text, sizeof text, "%d\n", (int)getpid());
    if (write(fd, text, (size_t)n) < 0) {
        fail("entering a cgroup");
    }
    close(fd);
}

static void unshare_namespaces(const char *what) {
    int flags = 0;
    for (const char *p = what; *p;) {
        const char *comma = strchr(p, ',');
        size_t length = comma ? (size_t)(comma - p) : strlen(p);
        if (length == 6 && strncmp(p, "cgroup", 6) == 0) {
            flags |= CLONE_NEWCGROUP;
        } else if (length == 5 && strncmp(p, "mount", 5) == 0) {
            flags |= CLONE_NEWNS;
        } else {
            malformed();
        }
        p += length + (comma ? 1 : 0);
        if (comma && !*p) {
            malformed();
        }
    }
    if (flags == 0) {
        malformed();
    }
    if (unshare(flags) < 0) {
        fail("unshare");
    }
    if (flags & CLONE_NEWNS) { /* nothing mounted here may reach the machine's mount table */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
            fail("making mounts private");
        }
    }
}

static void view(char *spec) {
    char *first = strchr(spec, ':');
    char *second = first ? strchr(first + 1, ':') : NULL;
    if (second == NULL) {
        malformed();
    }
    *first = '\0';
    *second = '\0';
    const char *kind = spec, *options = first + 1, *point = second + 1;
    /* Off first (the kernel refuses a cgroup mount on the root of a mount of the same
     * hierarchy), and nothing of the host's mount stays underneath to be uncovered. */
    if (umount2(point, MNT_DETACH) < 0) {
        failed_kind("unmounting the host's ", kind, " mount");
    }
    if (strcmp(kind, "hide") != 0) {
        const char *data = *options ? options : NULL;
        if (mount(kind, point, kind, MS_NOSUID | MS_NODEV | MS_NOEXEC, data) < 0) {
            failed_kind("mounting the ", kind, " view");
        }
    }
}

static void private_tmpfs(const char *point) {
    if (mode_of(point) != S_IFDIR) {
        return;
    }
    if (mount("tmpfs", point, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0) {
        fail("mounting a private tmpfs");
    }
}

static void read_only(const char *point) {
    if (mode_of(point) < 0) {
        return;
    }
    if (mount(point, point, NULL, MS_BIND | MS_REC, NULL) < 0) {
        fail("binding a read-only path");
    }
    struct mount_attr_ attr = {MOUNT_ATTR_RDONLY_, 0, 0, 0};
    if (syscall(SYS_mount_setattr, AT_FDCWD, point, AT_RECURSIVE, &attr, sizeof attr) < 0) {
        fail("making a path read-only");
    }
}

static void drop(const char *numbers) {
    for (const char *p = numbers; *p;) {
        const char *comma = strchr(p, ',');
        if (comma != p) { /* an empty entry names nothing */
            long long cap = number(p, comma);
            if (prctl(PR_CAPBSET_DROP, (unsigned long)cap, 0, 0, 0) < 0) {
                fail("dropping a capability");
            }
        }
        if (!comma) {
            break;
        }
        p = comma + 1;
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0) {
        fail("clearing ambient capabilities");
    }
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capget, &header, data) < 0) {
        fail("capget");
    }
    if (data[0].inheritable || data[1].inheritable) { /* they would outlive the bounding set */
        data[0].inheritable = data[1].inheritable = 0;
        if (syscall(SYS_capset, &header, data) < 0) {
            fail("capset");
        }
    }
}

static void parent_death_signal(const char *parent) {
    long long ppid = number(parent, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
        fail("PR_SET_PDEATHSIG");
    }
    if ((long long)getppid() != ppid) { /* the supervisor died before the signal was armed */
        kill(getpid(), SIGKILL);
        _exit(125);
    }
}

static void landlock(const char *handled, int count, char **steps) {
    const char *colon = strchr(handled, ':');
    struct ruleset_attr attr = {(uint64_t)number(handled, colon), 0, 0};
    if (colon && colon[1]) {
        attr.scoped = (uint64_t)number(colon + 1, NULL);
    }
    size_t size = attr.scoped ? sizeof attr : 8; /* an older kernel takes the first field only */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        fail("PR_SET_NO_NEW_PRIVS");
    }
    long ruleset = syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (ruleset < 0) {
        fail("landlock ruleset");
    }
    for (int i = 0; i < count; i++) {
        if (strncmp(steps[i], "rule=", 5) != 0) {
            continue;
        }
        const char *rule = steps[i] + 5;
        const char *separator = strchr(rule, ':');
        const char *path = separator ? separator + 1 : "";
        int fd = open(path, O_PATH | O_CLOEXEC);
        if (fd < 0) {
            continue; /* nothing there: nothing granted */
        }
        uint64_t rights = (uint64_t)number(rule, separator);
        struct stat st;
        if (fstat(fd, &st) < 0) { /* an O_PATH descriptor may be fstat'ed */
            fail("landlock rule");
        }
        if ((st.st_mode & S_IFMT) != S_IFDIR) {
            rights &= FILE_RIGHTS;
        }
        struct path_beneath beneath = {rights, fd};
        if (rights && syscall(SYS_landlock_add_rule, (int)ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) < 0) {
            fail("landlock rule");
        }
        close(fd);
    }
    if (syscall(SYS_landlock_restrict_self, (int)ruleset, 0) < 0) {
        fail("landlock restrict_self");
    }
    close((int)ruleset);
}

/* os.execvpe(argv[0], argv, environ); returns the errno to report. */
static int exec_program(char **argv) {
    const char *program = argv[0];
    if (strchr(program, '/')) {
        execve(program, argv, environ);
        return errno;
    }
    const char *search = getenv("PATH");
    if (search == NULL) {
        search = DEFAULT_PATH;
    }
    size_t name = strlen(program);
    char *full = malloc(strlen(search) + name + 2);
    if (full == NULL) {
        return ENOMEM;
    }
    int saved = 0, last = ENOENT;
    for (const char *p = search;;) {
        const char *colon = strchr(p, ':');
        size_t length = colon ? (size_t)(colon - p) : strlen(p);
        memcpy(full, p, length);
        if (length && p[length - 1] != '/') {
            full[length++] = '/';
        }
        memcpy(full + length, program, name + 1);
        execve(full, argv, environ);
        last = errno;
        if (!saved && last != ENOENT && last != ENOTDIR) {
            saved = last;
        }
        if (!colon) {
            break;
        }
        p = colon + 1;
    }
    return saved ? saved : last;
}

int main(int argc, char **argv) {
    int split = 1;
    while (split < argc && strcmp(argv[split], "--") != 0) {
        split++;
    }
    if (split + 1 >= argc) { /* no "--", or nothing after it */
        malformed();
    }
    char **steps = argv + 1;
    int count = split - 1;
    for (int i = 0; i < count; i++) {
        char *step = steps[i];
        char *equals = strchr(step, '=');
        size_t key = equals ? (size_t)(equals - step) : strlen(step);
        char *value = equals ? equals + 1 : step + key; /* no '=': the value is empty */
#define IS(name) (key == sizeof(name) - 1 && strncmp(step, name, key) == 0)
        if (IS("procs")) {
            enter(value);
        } else if (IS("ns")) {
            unshare_namespaces(value);
        } else if (IS("ro")) {
            read_only(value);
        } else if (IS("view")) {
            view(value);
        } else if (IS("shm")) {
            private_tmpfs(value);
        } else if (IS("drop")) {
            drop(value);
        } else if (IS("pdeathsig")) {
            parent_death_signal(value);
        } else if (IS("landlock")) {
            landlock(value, count, steps);
        }
#undef IS
    }
    int error = exec_program(argv + split + 1);
    say("exec", NULL, NULL, error);
    _exit(error == ENOENT ? 127 : 126);
}
