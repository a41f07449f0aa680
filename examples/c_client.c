/* A C serving process using libfairsched through its C ABI.
 *
 *   c_client [--socket PATH] [--tenant NAME] [--endpoint NAME] [--requests N]
 *
 * Connects, opens a tenant, submits N requests with small prompts (backing
 * off on RING_FULL by collecting completions), waits for every completion
 * using the completion descriptor with poll(2), and prints a summary line
 * per status with its HTTP mapping. Exits 0 when every request got exactly
 * one completion. Plain C11 + POSIX. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fairsched/fairsched.h"

#define BATCH 64

static void usage(FILE* out) {
  fprintf(out,
          "usage: c_client [--socket PATH] [--tenant NAME] [--endpoint NAME] [--requests N]\n"
          "  Submits N requests for tenant NAME to a running fairschedd and waits for\n"
          "  their completions. Defaults: --socket /run/fairsched/fairsched.sock\n"
          "  --tenant demo --endpoint chat --requests 10\n");
}

/* Waits on the completion descriptor (as an event loop would) and collects
 * what arrived. Returns the number of completions, or -1 on a fatal error. */
static long collect(fairsched_client* client, unsigned long* by_status, unsigned char* seen,
                    unsigned long requests, int block) {
  fairsched_completion done[BATCH];
  long total = 0;
  if (block) {
    int should_block = 0;
    fairsched_error err = fairsched_prepare_to_block(client, &should_block);
    if (err != FAIRSCHED_OK) {
      fprintf(stderr, "prepare_to_block: %s\n", fairsched_last_error_message());
      return -1;
    }
    if (should_block) {
      struct pollfd pfd;
      pfd.fd = fairsched_completion_fd(client);
      pfd.events = POLLIN;
      pfd.revents = 0;
      if (poll(&pfd, 1, 5000) == 0) {
        fprintf(stderr, "no completion within 5 s\n");
        return -1;
      }
    }
  }
  for (;;) {
    size_t n = fairsched_poll(client, done, BATCH);
    size_t i;
    if (n == 0) break;
    for (i = 0; i < n; ++i) {
      uint64_t tag = done[i].tag;
      if (tag >= requests || seen[tag]) {
        fprintf(stderr, "unexpected or duplicate completion for tag %llu\n",
                (unsigned long long)tag);
        return -1;
      }
      seen[tag] = 1;
      if (done[i].status >= 0 && done[i].status <= FAIRSCHED_STATUS_EXECUTOR_FAILED) {
        ++by_status[done[i].status];
      }
    }
    total += (long)n;
  }
  return total;
}

int main(int argc, char** argv) {
  const char* socket_path = NULL;
  const char* tenant_name = "demo";
  const char* endpoint = "chat";
  unsigned long requests = 10;
  unsigned long submitted = 0, completed = 0, i;
  unsigned long by_status[FAIRSCHED_STATUS_EXECUTOR_FAILED + 1];
  unsigned char* seen;
  uint32_t prompt[16];
  uint32_t tenant = 0;
  int a;
  fairsched_options options;
  fairsched_client* client = NULL;
  fairsched_submit_request req;
  fairsched_error err;

  for (a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[a], "--socket") == 0 && a + 1 < argc) {
      socket_path = argv[++a];
    } else if (strcmp(argv[a], "--tenant") == 0 && a + 1 < argc) {
      tenant_name = argv[++a];
    } else if (strcmp(argv[a], "--endpoint") == 0 && a + 1 < argc) {
      endpoint = argv[++a];
    } else if (strcmp(argv[a], "--requests") == 0 && a + 1 < argc) {
      requests = strtoul(argv[++a], NULL, 10);
    } else {
      usage(stderr);
      return 2;
    }
  }

  fairsched_options_init(&options);
  options.socket_path = socket_path; /* NULL keeps the default */
  options.client_name = "c-example";
  err = fairsched_connect(&options, &client);
  if (err != FAIRSCHED_OK) {
    fprintf(stderr, "connect: %s: %s\n", fairsched_error_name(err), fairsched_last_error_message());
    return 1;
  }
  err = fairsched_open_tenant(client, tenant_name, NULL, &tenant);
  if (err != FAIRSCHED_OK) {
    fprintf(stderr, "open tenant: %s\n", fairsched_last_error_message());
    fairsched_close(client);
    return 1;
  }

  memset(by_status, 0, sizeof(by_status));
  seen = calloc(requests > 0 ? requests : 1, 1);
  if (seen == NULL) {
    fairsched_close(client);
    return 1;
  }
  for (i = 0; i < 16; ++i) prompt[i] = (uint32_t)(100 + i);

  fairsched_submit_request_init(&req);
  req.tenant = tenant;
  req.endpoint = endpoint;
  req.prompt = prompt;
  req.prompt_tokens = 16;
  req.max_output_tokens = 32;
  req.timeout_ns = 10LL * 1000 * 1000 * 1000;

  while (completed < requests) {
    long got;
    int backlogged = 0;
    while (submitted < requests) {
      req.tag = submitted;
      err = fairsched_submit(client, &req, NULL);
      if (err == FAIRSCHED_ERR_RING_FULL) {
        backlogged = 1;
        break;
      }
      if (err != FAIRSCHED_OK) {
        fprintf(stderr, "submit: %s\n", fairsched_last_error_message());
        free(seen);
        fairsched_close(client);
        return 1;
      }
      ++submitted;
    }
    /* Block only when there is nothing more to submit or the ring is full. */
    got = collect(client, by_status, seen, requests, backlogged || submitted == requests);
    if (got < 0) {
      free(seen);
      fairsched_close(client);
      return 1;
    }
    completed += (unsigned long)got;
  }

  printf("%lu requests, %lu completions\n", requests, completed);
  for (a = 0; a <= FAIRSCHED_STATUS_EXECUTOR_FAILED; ++a) {
    if (by_status[a] > 0) {
      fairsched_completion probe;
      memset(&probe, 0, sizeof(probe));
      probe.status = a;
      printf("  %-18s %8lu  (HTTP %d)\n", fairsched_status_name(a), by_status[a],
             fairsched_http_status(&probe));
    }
  }
  free(seen);
  fairsched_close(client);
  return 0;
}
