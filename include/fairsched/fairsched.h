/* libfairsched, C ABI. The same library as fairsched/client.hpp, behind
 * opaque handles and plain structs; no C++ types cross it.
 *
 *   fairsched_options opts;
 *   fairsched_options_init(&opts);
 *   opts.socket_path = "/run/fairsched/fairsched.sock";
 *   fairsched_client* c;
 *   if (fairsched_connect(&opts, &c) != FAIRSCHED_OK) {
 *     fprintf(stderr, "%s\n", fairsched_last_error_message());
 *   }
 *
 * Threading: as in client.hpp. Every function but fairsched_close may be
 * called from many threads at once; fairsched_close REQUIRES that no other
 * call on the handle is in progress. Each request fairsched_submit accepted
 * gets exactly one completion (status SHUTTING_DOWN, `local` set, when the
 * daemon went away first).
 *
 * Errors are fairsched_error values; fairsched_last_error_message() gives
 * the calling thread's message for its last failed call. Times are int64_t
 * nanoseconds; deadlines are absolute CLOCK_MONOTONIC. */
#ifndef FAIRSCHED_FAIRSCHED_H
#define FAIRSCHED_FAIRSCHED_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define FAIRSCHED_C_API __attribute__((visibility("default")))
#else
#define FAIRSCHED_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fairsched_client fairsched_client;

/* fairsched::ErrorCode + 1; 0 is success. */
typedef enum fairsched_error {
  FAIRSCHED_OK = 0,
  FAIRSCHED_ERR_INVALID_ARGUMENT = 1,
  FAIRSCHED_ERR_CONNECT_FAILED = 2,
  FAIRSCHED_ERR_TIMED_OUT = 3,
  FAIRSCHED_ERR_UNAUTHORIZED = 4,
  FAIRSCHED_ERR_VERSION_MISMATCH = 5,
  FAIRSCHED_ERR_NO_CAPACITY = 6,
  FAIRSCHED_ERR_SHUTTING_DOWN = 7,
  FAIRSCHED_ERR_REFUSED = 8,
  FAIRSCHED_ERR_PROTOCOL = 9,
  FAIRSCHED_ERR_NOT_CONNECTED = 10,
  FAIRSCHED_ERR_DAEMON_LOST = 11,
  FAIRSCHED_ERR_UNKNOWN_TENANT = 12,
  FAIRSCHED_ERR_UNKNOWN_ENDPOINT = 13,
  FAIRSCHED_ERR_PROMPT_TOO_LARGE = 14,
  FAIRSCHED_ERR_RING_FULL = 15, /* back off: poll, wait, or retry later */
  FAIRSCHED_ERR_SYSTEM = 16
} fairsched_error;

/* fairsched::Status: the outcome of one request. */
typedef enum fairsched_status {
  FAIRSCHED_STATUS_OK = 0,
  FAIRSCHED_STATUS_RATE_LIMITED = 1,
  FAIRSCHED_STATUS_OVERLOADED = 2,
  FAIRSCHED_STATUS_QUEUE_FULL = 3,
  FAIRSCHED_STATUS_DEADLINE_EXCEEDED = 4,
  FAIRSCHED_STATUS_INVALID = 5,
  FAIRSCHED_STATUS_UNAUTHORIZED = 6,
  FAIRSCHED_STATUS_CANCELLED = 7,
  FAIRSCHED_STATUS_SHUTTING_DOWN = 8,
  FAIRSCHED_STATUS_EXECUTOR_FAILED = 9,
  FAIRSCHED_STATUS_SLOW_CONSUMER = 10
} fairsched_status;

/* Fill with fairsched_options_init(), then change what you need. */
typedef struct fairsched_options {
  size_t struct_size;      /* sizeof(fairsched_options), set by init */
  const char* socket_path; /* default "/run/fairsched/fairsched.sock" */
  const char* client_name; /* default ""; else a name (see below) */
  int64_t connect_timeout_ns;
  int64_t control_timeout_ns;
  int64_t spin_ns;                    /* busy-poll in fairsched_wait before sleeping */
  int32_t reconnect;                  /* nonzero: reconnect after the daemon went away */
  int32_t reserved;                   /* 0 */
  int64_t reconnect_initial_delay_ns; /* backoff between reconnect attempts */
  int64_t reconnect_max_delay_ns;
} fairsched_options;

typedef struct fairsched_submit_request {
  size_t struct_size; /* sizeof(fairsched_submit_request), set by init */
  uint32_t tenant;    /* from fairsched_open_tenant */
  int32_t priority;   /* higher first, within the tenant */
  const char* endpoint;
  const uint32_t* prompt; /* token ids, copied by fairsched_submit */
  size_t prompt_tokens;
  uint32_t max_output_tokens;
  uint32_t reserved;   /* 0 */
  int64_t deadline_ns; /* absolute CLOCK_MONOTONIC; 0: none */
  int64_t timeout_ns;  /* relative to the call; 0: none; the earlier of the two wins */
  uint64_t tag;        /* echoed in the completion */
} fairsched_submit_request;

typedef struct fairsched_completion {
  uint64_t request_id;
  uint64_t tag;
  int32_t status; /* a fairsched_status */
  uint32_t output_tokens;
  int64_t retry_after_ns; /* RATE_LIMITED: wait at least this long; 0 when unknown */
  int64_t queue_wait_ns;
  int64_t service_ns;
  uint64_t checksum;
  int32_t local; /* nonzero: made up by the library because the daemon went away */
  int32_t reserved;
} fairsched_completion;

typedef struct fairsched_retry_policy {
  int32_t max_attempts;       /* first attempt included; default 3 */
  int32_t reserved;           /* 0 */
  int64_t base_backoff_ns;    /* default 100 ms */
  int64_t max_backoff_ns;     /* default 10 s: the cap of the full-jitter window */
  int64_t max_retry_after_ns; /* default 60 s: a longer retry_after ends the retries */
  int64_t attempt_timeout_ns; /* negative (default): until the deadline, or forever */
} fairsched_retry_policy;

FAIRSCHED_C_API void fairsched_options_init(fairsched_options* options);
FAIRSCHED_C_API void fairsched_submit_request_init(fairsched_submit_request* request);
FAIRSCHED_C_API void fairsched_retry_policy_init(fairsched_retry_policy* policy);

/* Connects and says Hello. On success *out is a handle for fairsched_close. */
FAIRSCHED_C_API fairsched_error fairsched_connect(const fairsched_options* options,
                                                  fairsched_client** out);
/* Opens a tenant (or returns the handle already open for it). tier may be NULL.
 * Names (tenant, tier, client_name) are 1 to 63 characters, each an ASCII
 * letter, a digit or one of . _ - : @ / + (fairsched/name.hpp); any other
 * name is FAIRSCHED_ERR_INVALID_ARGUMENT, and the daemon refuses it too. */
FAIRSCHED_C_API fairsched_error fairsched_open_tenant(fairsched_client* client, const char* tenant,
                                                      const char* tier, uint32_t* out_tenant);
/* Writes one request into its tenant's ring; never blocks (see client.hpp
 * for the reconnect exception). out_request_id may be NULL. */
FAIRSCHED_C_API fairsched_error fairsched_submit(fairsched_client* client,
                                                 const fairsched_submit_request* request,
                                                 uint64_t* out_request_id);
/* Copies up to max completions into out; returns how many. Never blocks. */
FAIRSCHED_C_API size_t fairsched_poll(fairsched_client* client, fairsched_completion* out,
                                      size_t max);
/* Blocks until fairsched_poll has something or timeout_ns passes (negative:
 * forever). FAIRSCHED_ERR_TIMED_OUT, FAIRSCHED_ERR_DAEMON_LOST (outstanding
 * requests are ready to poll as SHUTTING_DOWN), FAIRSCHED_ERR_NOT_CONNECTED. */
FAIRSCHED_C_API fairsched_error fairsched_wait(fairsched_client* client, int64_t timeout_ns);
/* A descriptor for epoll/poll, readable when fairsched_poll may have
 * something. Call fairsched_prepare_to_block before every blocking wait on it. */
FAIRSCHED_C_API int fairsched_completion_fd(const fairsched_client* client);
/* *block = 1: block on the fd now; 0: poll first. */
FAIRSCHED_C_API fairsched_error fairsched_prepare_to_block(fairsched_client* client, int* block);
/* Submits and blocks until this request's completion (timeout_ns negative: forever). */
FAIRSCHED_C_API fairsched_error fairsched_submit_and_wait(fairsched_client* client,
                                                          const fairsched_submit_request* request,
                                                          int64_t timeout_ns,
                                                          fairsched_completion* out);
/* fairsched_submit_and_wait with retries (backoff with full jitter, retry_after
 * honoured, the client's retry budget). policy may be NULL (defaults).
 * FAIRSCHED_OK when *out holds the last attempt's completion (whatever its
 * status); attempts may be NULL. */
FAIRSCHED_C_API fairsched_error fairsched_submit_with_retry(fairsched_client* client,
                                                            const fairsched_submit_request* request,
                                                            const fairsched_retry_policy* policy,
                                                            fairsched_completion* out,
                                                            int32_t* attempts);
/* Nonzero when connected. */
FAIRSCHED_C_API int fairsched_connected(const fairsched_client* client);
/* Closes the connection and frees the handle; NULL is fine. */
FAIRSCHED_C_API void fairsched_close(fairsched_client* client);

/* "OK", "RATE_LIMITED", ...; "UNKNOWN" for other values. Static strings. */
FAIRSCHED_C_API const char* fairsched_status_name(int status);
FAIRSCHED_C_API const char* fairsched_error_name(fairsched_error error);
/* The calling thread's message for its last failed call; "" if none. Valid
 * until the thread's next call into the library. */
FAIRSCHED_C_API const char* fairsched_last_error_message(void);

/* HTTP status for a completion (docs/client.md has the table), and the
 * value of its retry-after-ms header (-1: send none). */
FAIRSCHED_C_API int fairsched_http_status(const fairsched_completion* completion);
FAIRSCHED_C_API int64_t fairsched_retry_after_ms(const fairsched_completion* completion);

#ifdef __cplusplus
}
#endif

#endif /* FAIRSCHED_FAIRSCHED_H */
