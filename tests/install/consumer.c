/* An out-of-tree consumer of the installed library through the C API only: opens subsystem
 * argv[1] over the paths argv[2..] (ADDR:PORT each), writes 64 KiB, reads it back, verifies it,
 * exits 0. Built by the install test with
 * `cc consumer.c $(pkg-config --cflags --libs nvmeof)`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvmeof/nvmeof.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: consumer NQN ADDR:PORT [ADDR:PORT...]\n");
    return 2;
  }
  nvmeof_volume_options opts;
  nvmeof_volume_options_init(&opts);
  opts.subnqn = argv[1];
  nvmeof_volume* vol = NULL;
  int rc = nvmeof_volume_open((const char* const*)(argv + 2), (size_t)(argc - 2), &opts, &vol);
  if (rc != 0) {
    fprintf(stderr, "consumer: open %s: %s\n", argv[2], nvmeof_strerror(rc));
    return 1;
  }
  const size_t len = 64 * 1024;
  unsigned char* out = NULL;
  unsigned char* in = NULL;
  if (nvmeof_buffer_alloc(len, -1, (void**)&out) != 0 || nvmeof_buffer_alloc(len, -1, (void**)&in) != 0) {
    fprintf(stderr, "consumer: buffer allocation failed\n");
    return 1;
  }
  size_t i;
  for (i = 0; i < len; ++i) out[i] = (unsigned char)(i * 7 + 3);
  nvmeof_status st = 0;
  char why[96];
  rc = nvmeof_write(vol, out, len, 0, &st);
  if (rc != 0 || !nvmeof_status_ok(st)) {
    fprintf(stderr, "consumer: write: %s %s\n", nvmeof_strerror(rc), nvmeof_status_str(st, why, sizeof why));
    return 1;
  }
  rc = nvmeof_read(vol, in, len, 0, &st);
  if (rc != 0 || !nvmeof_status_ok(st)) {
    fprintf(stderr, "consumer: read: %s %s\n", nvmeof_strerror(rc), nvmeof_status_str(st, why, sizeof why));
    return 1;
  }
  if (memcmp(in, out, len) != 0) {
    fprintf(stderr, "consumer: data read back differs\n");
    return 1;
  }
  nvmeof_buffer_free(out);
  nvmeof_buffer_free(in);
  nvmeof_volume_close(vol);
  printf("consumer: %zu bytes written and verified over %d path(s) of %s\n", len, argc - 2, argv[1]);
  return 0;
}
