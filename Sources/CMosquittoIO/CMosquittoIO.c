#define _GNU_SOURCE
#include "CMosquittoIO.h"

#if defined(__linux__)
#include <elf.h>
#include <link.h>
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static __thread struct cmosq_reader *armed;
static __thread struct cmosq_writer *armedWriter;

long cmosq_io_read(int fd, void *buffer, size_t count) {
    struct cmosq_reader *reader = armed;
    if (reader == NULL || reader->fd != fd || count == 0) {
        return read(fd, buffer, count);
    }
    size_t available = reader->end - reader->start;
    if (available == 0) {
        reader->start = 0;
        reader->end = 0;
        if (count >= reader->capacity) {
            return read(fd, buffer, count);
        }
        ssize_t got = read(fd, reader->data, reader->capacity);
        if (got <= 0) {
            return got;
        }
        reader->fills += 1;
        reader->end = (size_t)got;
        available = (size_t)got;
    }
    size_t taken = count < available ? count : available;
    memcpy(buffer, reader->data + reader->start, taken);
    reader->start += taken;
    return (long)taken;
}

struct cmosq_reader *cmosq_reader_create(size_t capacity) {
    struct cmosq_reader *reader = calloc(1, sizeof *reader);
    if (reader == NULL) return NULL;
    reader->data = malloc(capacity);
    if (reader->data == NULL) {
        free(reader);
        return NULL;
    }
    reader->capacity = capacity;
    reader->fd = -1;
    return reader;
}

void cmosq_reader_destroy(struct cmosq_reader *reader) {
    if (reader == NULL) return;
    if (armed == reader) armed = NULL;
    free(reader->data);
    free(reader);
}

bool cmosq_reader_arm(struct cmosq_reader *reader, int fd) {
    if (reader->start != reader->end && reader->fd != fd) {
        return false;
    }
    reader->fd = fd;
    armed = reader;
    return true;
}

void cmosq_reader_disarm(void) {
    armed = NULL;
}

void cmosq_reader_discard(struct cmosq_reader *reader) {
    reader->start = 0;
    reader->end = 0;
    reader->fd = -1;
}

/* Writes everything held, or until the socket is full. */
static long flush_held(struct cmosq_writer *writer) {
    size_t sent = 0;
    while (sent < writer->length) {
        ssize_t wrote = write(writer->fd, writer->data + sent, writer->length - sent);
        if (wrote > 0) {
            writer->flushes += 1;
            sent += (size_t)wrote;
            continue;
        }
        if (wrote < 0 && errno == EINTR) continue;
        if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        int error = wrote < 0 ? errno : EPIPE;
        writer->length = 0;
        errno = error;
        return -1;
    }
    if (sent > 0) {
        memmove(writer->data, writer->data + sent, writer->length - sent);
        writer->length -= sent;
    }
    return (long)writer->length;
}

long cmosq_io_write(int fd, const void *buffer, size_t count) {
    struct cmosq_writer *writer = armedWriter;
    if (writer == NULL || writer->fd != fd || count == 0) {
        return write(fd, buffer, count);
    }
    if (writer->length + count > writer->capacity) {
        long held = flush_held(writer);
        if (held < 0) return -1;
        if (held > 0) {
            /* The socket is full: libmosquitto keeps the packet and waits to write. */
            errno = EAGAIN;
            return -1;
        }
        if (count >= writer->capacity) {
            return write(fd, buffer, count);
        }
    }
    memcpy(writer->data + writer->length, buffer, count);
    writer->length += count;
    return (long)count;
}

int cmosq_io_close(int fd) {
    struct cmosq_writer *writer = armedWriter;
    if (writer != NULL && writer->fd == fd && writer->length > 0) {
        /* What libmosquitto wrote last (DISCONNECT) leaves before the socket closes. */
        (void)flush_held(writer);
        writer->length = 0;
    }
    struct cmosq_reader *reader = armed;
    if (reader != NULL && reader->fd == fd) {
        reader->start = 0;
        reader->end = 0;
    }
    return close(fd);
}

struct cmosq_writer *cmosq_writer_create(size_t capacity) {
    struct cmosq_writer *writer = calloc(1, sizeof *writer);
    if (writer == NULL) return NULL;
    writer->data = malloc(capacity);
    if (writer->data == NULL) {
        free(writer);
        return NULL;
    }
    writer->capacity = capacity;
    writer->fd = -1;
    return writer;
}

void cmosq_writer_destroy(struct cmosq_writer *writer) {
    if (writer == NULL) return;
    if (armedWriter == writer) armedWriter = NULL;
    free(writer->data);
    free(writer);
}

bool cmosq_writer_arm(struct cmosq_writer *writer, int fd) {
    if (writer->length > 0 && writer->fd != fd) {
        return false;
    }
    writer->fd = fd;
    armedWriter = writer;
    return true;
}

void cmosq_writer_disarm(void) {
    armedWriter = NULL;
}

long cmosq_writer_flush(struct cmosq_writer *writer) {
    if (writer->length == 0) return 0;
    return flush_held(writer);
}

void cmosq_writer_discard(struct cmosq_writer *writer) {
    writer->length = 0;
    writer->fd = -1;
}

/* Finding libmosquitto's `read` slot: its dynamic section names the relocations of
 * imported functions (DT_JMPREL, or DT_RELA for a library linked with -fno-plt); the one
 * whose symbol is "read" is the slot that every call from libmosquitto goes through. */

/* The hooks are built for Linux's ELF on x86_64 and aarch64 only; elsewhere
 * `cmosq_io_install` answers false and libmosquitto's I/O is left as it is. */
#if defined(__linux__) && defined(__ELF__) && (defined(__x86_64__) || defined(__aarch64__))
#define CMOSQ_CAN_HOOK 1
#else
#define CMOSQ_CAN_HOOK 0
#endif

#if CMOSQ_CAN_HOOK

#if defined(__x86_64__)
#define CMOSQ_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define CMOSQ_R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define CMOSQ_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define CMOSQ_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

enum { CMOSQ_HOOKS = 3 };

static const char *const hookNames[CMOSQ_HOOKS] = {"read", "write", "close"};

struct cmosq_patch {
    /* Slots found for each hook, and whether each was written. */
    void **slots[CMOSQ_HOOKS][4];
    int found[CMOSQ_HOOKS];
    bool complete;
};

static uintptr_t dyn_address(const struct dl_phdr_info *info, ElfW(Addr) value) {
    /* glibc relocates these entries in place on most targets; a value below the load
     * address is still relative. */
    return value < info->dlpi_addr ? info->dlpi_addr + value : value;
}

/* Points `slot` at `function`. A slot in the RELRO segment (a library linked with -z now)
 * is read-only: it is made writable for the store and read-only again. */
static bool write_slot(const struct dl_phdr_info *info, void **slot, void *function) {
    if (__atomic_load_n(slot, __ATOMIC_ACQUIRE) == function) return true;
    uintptr_t address = (uintptr_t)slot;
    for (ElfW(Half) index = 0; index < info->dlpi_phnum; index++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[index];
        if (header->p_type != PT_GNU_RELRO) continue;
        uintptr_t start = info->dlpi_addr + header->p_vaddr;
        if (address < start || address >= start + header->p_memsz) continue;
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        void *first = (void *)(address & ~(page - 1));
        if (mprotect(first, (size_t)page, PROT_READ | PROT_WRITE) != 0) return false;
        __atomic_store_n(slot, function, __ATOMIC_RELEASE);
        mprotect(first, (size_t)page, PROT_READ);
        return true;
    }
    __atomic_store_n(slot, function, __ATOMIC_RELEASE);
    return true;
}

static void patch_relocations(const struct dl_phdr_info *info, const ElfW(Rela) *relocations, size_t size,
                              const ElfW(Sym) *symbols, const char *strings, struct cmosq_patch *patch) {
    size_t count = size / sizeof(ElfW(Rela));
    for (size_t index = 0; index < count; index++) {
        const ElfW(Rela) *relocation = &relocations[index];
        unsigned long type = ELF64_R_TYPE(relocation->r_info);
        if (type != CMOSQ_R_JUMP_SLOT && type != CMOSQ_R_GLOB_DAT) continue;
        const ElfW(Sym) *symbol = &symbols[ELF64_R_SYM(relocation->r_info)];
        for (int hook = 0; hook < CMOSQ_HOOKS; hook++) {
            if (strcmp(strings + symbol->st_name, hookNames[hook]) != 0) continue;
            if (patch->found[hook] < 4) {
                patch->slots[hook][patch->found[hook]] = (void **)(info->dlpi_addr + relocation->r_offset);
            }
            patch->found[hook] += 1;
        }
    }
}

static int patch_library(struct dl_phdr_info *info, size_t size, void *context) {
    (void)size;
    struct cmosq_patch *patch = context;
    if (info->dlpi_name == NULL || strstr(info->dlpi_name, "libmosquitto.so") == NULL) return 0;
    const ElfW(Dyn) *dynamic = NULL;
    for (ElfW(Half) index = 0; index < info->dlpi_phnum; index++) {
        if (info->dlpi_phdr[index].p_type == PT_DYNAMIC) {
            dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[index].p_vaddr);
        }
    }
    if (dynamic == NULL) return 1;
    const ElfW(Sym) *symbols = NULL;
    const char *strings = NULL;
    const ElfW(Rela) *jumps = NULL, *others = NULL;
    size_t jumpsSize = 0, othersSize = 0;
    bool rela = true;
    for (const ElfW(Dyn) *entry = dynamic; entry->d_tag != DT_NULL; entry++) {
        switch (entry->d_tag) {
        case DT_SYMTAB: symbols = (const ElfW(Sym) *)dyn_address(info, entry->d_un.d_ptr); break;
        case DT_STRTAB: strings = (const char *)dyn_address(info, entry->d_un.d_ptr); break;
        case DT_JMPREL: jumps = (const ElfW(Rela) *)dyn_address(info, entry->d_un.d_ptr); break;
        case DT_PLTRELSZ: jumpsSize = entry->d_un.d_val; break;
        case DT_RELA: others = (const ElfW(Rela) *)dyn_address(info, entry->d_un.d_ptr); break;
        case DT_RELASZ: othersSize = entry->d_un.d_val; break;
        case DT_PLTREL: rela = entry->d_un.d_val == DT_RELA; break;
        default: break;
        }
    }
    if (symbols == NULL || strings == NULL || !rela) return 1;
    if (jumps != NULL) patch_relocations(info, jumps, jumpsSize, symbols, strings, patch);
    if (others != NULL) patch_relocations(info, others, othersSize, symbols, strings, patch);
    /* All three or none: a writer without the close hook could lose DISCONNECT. */
    for (int hook = 0; hook < CMOSQ_HOOKS; hook++) {
        if (patch->found[hook] < 1 || patch->found[hook] > 4) return 1;
    }
    void *functions[CMOSQ_HOOKS] = {(void *)cmosq_io_read, (void *)cmosq_io_write, (void *)cmosq_io_close};
    bool complete = true;
    for (int hook = 0; hook < CMOSQ_HOOKS; hook++) {
        for (int index = 0; index < patch->found[hook]; index++) {
            if (!write_slot(info, patch->slots[hook][index], functions[hook])) complete = false;
        }
    }
    patch->complete = complete;
    return 1;
}

static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static bool installed;

static void install(void) {
    struct cmosq_patch patch;
    memset(&patch, 0, sizeof patch);
    dl_iterate_phdr(patch_library, &patch);
    installed = patch.complete;
}

bool cmosq_io_install(void) {
    pthread_once(&install_once, install);
    return installed;
}

#else

bool cmosq_io_install(void) {
    return false;
}

#endif
