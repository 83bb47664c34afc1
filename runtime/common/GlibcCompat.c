/*===- GlibcCompat.c - C library functions newer than the GPU machine's ---===*
 *
 * Linked only into the statically linked runtime (BRAID_STATIC_RUNTIME),
 * whose binaries are built here against glibc 2.36 and run on machines with
 * an older one. The static libstdc++ calls arc4random (glibc 2.36) for
 * std::random_device; this definition, in the executable, is the one it
 * binds to, so the binaries ask for nothing newer than glibc 2.34. It draws
 * from getrandom (glibc 2.25), as glibc's own does.
 *
 *===----------------------------------------------------------------------===*/

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

uint32_t arc4random(void) {
  uint32_t value;
  for (;;) {
    ssize_t n = getrandom(&value, sizeof value, 0);
    if (n == (ssize_t)sizeof value)
      return value;
    if (n < 0 && errno != EINTR)
      abort(); /* no kernel randomness: glibc's arc4random aborts too */
  }
}
