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
 * call on the handle is in progress (fairsched_shutdown ends those that
 * block). Each request fairsched_submit accepted gets exactly one completion
 * (status SHUTTING_DOWN, `local` set, when the daemon went away first).
 *
 * fork(): in a child, a handle the parent connected fails every call with
 * FAIRSCHED_ERR_NOT_CONNECTED, and fairsched_close there only releases the
 * child's copies of its mappings and descriptors: the parent's connection
 * is not touched. A child connects its own.
 *
 * Errors are fairsched_error values; fairsched_last_error_message() gives
 * the calling thread's message for its last failed call. Times are int64_t
 * nanoseconds; deadlines are absolute CLOCK_MONOTONIC.
 *
 * The worker role (fairsched/worker.hpp) is here too, behind its own handle,
 * fairsched_worker: an engine attached to an endpoint with executor =
 * "worker" takes assignments and streams their tokens back.
 *
 * Growing the ABI. Every struct only ever grows at its end.
 * fairsched_options, fairsched_submit_request and fairsched_worker_options
 * carry struct_size, set by their _init function: the library reads only the
 * fields the caller's struct_size covers and takes the rest as their
 * defaults, so a program built against an older header keeps working. The
 * others (fairsched_retry_policy, and those the library fills:
 * fairsched_completion, fairsched_work_item, fairsched_worker_stats) carry
 * no size: when one grows, a program that uses it must be rebuilt against
 * the new header. fairsched_completion grew (the fields after `reserved`)
 * when streaming came. */
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
typedef struct fairsched_worker fairsched_worker;

/* The most bytes of params a request may carry (fairsched::kMaxParamsBytes). */
#define FAIRSCHED_MAX_PARAMS_BYTES 4096

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
  /* Worker endpoints (executor = "worker") only; the daemon ends a request to
   * another endpoint that sets any of these INVALID. Added after `tag`: a
   * struct_size that ends at `tag` leaves them all unset. */
  int32_t stream;              /* nonzero: the output tokens arrive as partial completions */
  int32_t counts_only;         /* nonzero: prompt_token_count is the prompt's length and
                                  prompt is empty (the body is named in params) */
  const void* params;          /* opaque to the daemon, handed to the worker; copied by
                                  fairsched_submit; NULL when params_bytes is 0 */
  size_t params_bytes;         /* at most FAIRSCHED_MAX_PARAMS_BYTES */
  uint32_t prompt_token_count; /* counts_only: the prompt's length in tokens */
  uint32_t reserved2;          /* 0 */
  /* Added with prefix routing; a struct_size that ends at `reserved2` leaves
   * them unset. The prompt's prefix identity, precomputed
   * (fairsched_prefix_block_hashes with the endpoint's prefix_block_tokens,
   * at most 1024 hashes): what an endpoint with routing = "prefix" places
   * the request by. Needed for counts_only requests; copied by fairsched_submit.
   * NULL when prefix_blocks is 0. */
  const uint64_t* prefix;
  size_t prefix_blocks;
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
  /* Added with streaming (worker endpoints). A partial completion is one
   * chunk of a request submitted with `stream`: request_id, tag, partial,
   * first_token, tokens, token_count and emitted_ns are set, status is OK
   * and the rest is 0. A request's chunks come in order, without gaps,
   * before its one final completion (partial 0, tokens NULL). */
  int32_t partial;        /* nonzero: a stream chunk, not the end */
  uint32_t first_token;   /* partial: the index of tokens[0] in the request's output */
  const uint32_t* tokens; /* partial: the chunk's token_count tokens (lifetime: fairsched_poll) */
  uint32_t token_count;
  uint32_t input_tokens;          /* worker endpoints: the prompt tokens served */
  int64_t emitted_ns;             /* partial: CLOCK_MONOTONIC when the worker produced them */
  int64_t time_to_first_token_ns; /* worker endpoints: dispatch to the first output token;
                                     0 when none came (microsecond resolution) */
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
/* Opens count tenants in one pipelined exchange (over 100,000 a second on one
 * connection). out_tenants[i] is tenants[i]'s handle, or FAIRSCHED_NO_TENANT
 * when it could not be opened; the result is the first such error (its text
 * in fairsched_last_error_message), FAIRSCHED_OK when every one opened. */
#define FAIRSCHED_NO_TENANT UINT32_MAX
FAIRSCHED_C_API fairsched_error fairsched_open_tenants(fairsched_client* client,
                                                       const char* const* tenants, size_t count,
                                                       const char* tier, uint32_t* out_tenants);
/* Releases a tenant: its queued requests end CANCELLED (running ones finish),
 * and the handle is no longer valid (FAIRSCHED_ERR_UNKNOWN_TENANT). Opening
 * the name again gives a new handle. A connection holds up to the daemon's
 * max_tenants_per_connection tenants open (65,536 by default). */
FAIRSCHED_C_API fairsched_error fairsched_close_tenant(fairsched_client* client, uint32_t tenant);
/* Closes count tenants in one pipelined exchange; the first error, or OK. */
FAIRSCHED_C_API fairsched_error fairsched_close_tenants(fairsched_client* client,
                                                        const uint32_t* tenants, size_t count);
/* Writes one request into its tenant's ring; never blocks (see client.hpp
 * for the reconnect exception). out_request_id may be NULL. */
FAIRSCHED_C_API fairsched_error fairsched_submit(fairsched_client* client,
                                                 const fairsched_submit_request* request,
                                                 uint64_t* out_request_id);
/* Copies up to max completions into out; returns how many. Never blocks.
 * The tokens of partial completions live in a buffer of the calling thread
 * that the library owns: they stay valid until the same thread calls
 * fairsched_poll again (for any client) or exits, and not longer. Copy
 * them to keep them; another thread's fairsched_poll does not touch them,
 * nor does fairsched_close. */
FAIRSCHED_C_API size_t fairsched_poll(fairsched_client* client, fairsched_completion* out,
                                      size_t max);
/* Withdraws request_id: queued, it ends CANCELLED at once; running on a
 * worker, the worker is told to abort it and it ends CANCELLED with the
 * tokens produced so far (output_tokens); running in an in-daemon executor,
 * it finishes as it would have. Either way exactly one final completion
 * still comes. Never blocks. FAIRSCHED_ERR_INVALID_ARGUMENT (not
 * outstanding: already completed, or not this client's), _RING_FULL (try
 * again), _NOT_CONNECTED (the connection it was submitted on is gone: it
 * completes SHUTTING_DOWN by itself). */
FAIRSCHED_C_API fairsched_error fairsched_cancel(fairsched_client* client, uint64_t request_id);
/* Blocks until fairsched_poll has something or timeout_ns passes (negative:
 * forever). FAIRSCHED_ERR_TIMED_OUT, FAIRSCHED_ERR_DAEMON_LOST (outstanding
 * requests are ready to poll as SHUTTING_DOWN), FAIRSCHED_ERR_NOT_CONNECTED. */
FAIRSCHED_C_API fairsched_error fairsched_wait(fairsched_client* client, int64_t timeout_ns);
/* A descriptor for epoll/poll, readable when fairsched_poll may have
 * something. Call fairsched_prepare_to_block before every blocking wait on it. */
FAIRSCHED_C_API int fairsched_completion_fd(const fairsched_client* client);
/* *block = 1: block on the fd now; 0: poll first. */
FAIRSCHED_C_API fairsched_error fairsched_prepare_to_block(fairsched_client* client, int* block);
/* Submits and blocks until this request's completion (timeout_ns negative:
 * forever). With `stream`, the chunks are dropped: *out is the final one. */
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
/* Ends the connection for good without freeing the handle, as shutdown(2)
 * before close(2): calls blocked in fairsched_wait, _submit_and_wait or a
 * control round trip return FAIRSCHED_ERR_NOT_CONNECTED at once, and so does
 * every later call (fairsched_poll hands out what is left: the outstanding
 * requests completed SHUTTING_DOWN). May be called from any thread while
 * other calls on the handle are in progress; fairsched_close it once they
 * have returned. Idempotent; NULL is fine. */
FAIRSCHED_C_API void fairsched_shutdown(fairsched_client* client);
/* Closes the connection and frees the handle; NULL is fine. */
FAIRSCHED_C_API void fairsched_close(fairsched_client* client);

/* The worker role: an engine attached to one endpoint with executor =
 * "worker" (fairsched/worker.hpp has the loop it runs and the rules).
 *
 * Threading: fairsched_worker_set_capacity, _emit, _finish, _finish_counted,
 * _connected, _endpoint_name, _id and _get_stats may be called from any
 * number of threads at once; _poll, _wait and
 * _prepare_to_block from one thread at a time; fairsched_worker_shutdown from
 * any thread at any time; fairsched_worker_close REQUIRES that no other call
 * on the handle is in progress. */

/* Fill with fairsched_worker_options_init(), then set at least endpoint. */
typedef struct fairsched_worker_options {
  size_t struct_size;      /* sizeof(fairsched_worker_options), set by init */
  const char* socket_path; /* default "/run/fairsched/fairsched.sock" */
  const char* endpoint;    /* required: an endpoint with executor = "worker" */
  const char* worker_name; /* default ""; else a name (informational) */
  int64_t connect_timeout_ns;
  int64_t event_timeout_ns; /* how long _emit/_finish/_set_capacity wait for room
                               in a full event ring before FAIRSCHED_ERR_RING_FULL */
} fairsched_worker_options;

typedef enum fairsched_work_kind {
  FAIRSCHED_WORK_ASSIGN = 0, /* run the request */
  FAIRSCHED_WORK_ABORT = 1,  /* stop request id and finish it with FAIRSCHED_STATUS_CANCELLED */
  FAIRSCHED_WORK_PREEMPT = 2 /* give request id back: stop it, free its KV, emit what it
                                generated, then fairsched_worker_preempted (a worker that
                                ignores it keeps running it; the daemon stops asking) */
} fairsched_work_kind;

/* What fairsched_worker_poll hands out. For ABORT and PREEMPT only kind and id are set
 * (the rest is 0 and NULL). prompt and params point into the worker handle:
 * valid until the next fairsched_worker_poll or fairsched_worker_close. */
typedef struct fairsched_work_item {
  int32_t kind;    /* a fairsched_work_kind */
  uint32_t tenant; /* the daemon's tenant id (stable while the tenant is active) */
  uint64_t id;     /* the daemon's; _emit and _finish name it */
  int32_t priority;
  int32_t counts_only;    /* nonzero: prompt_tokens is a count, prompt is empty, params name
                             the body */
  int64_t deadline_ns;    /* absolute CLOCK_MONOTONIC; 0: none */
  uint32_t prompt_tokens; /* the prompt's length in tokens (charged and reserved by it) */
  uint32_t max_output_tokens;
  const uint32_t* prompt; /* the prompt_len token ids; NULL when empty */
  uint32_t prompt_len;    /* prompt_tokens, or 0 when counts_only */
  uint32_t params_bytes;
  const void* params; /* the submitter's opaque parameters; NULL when params_bytes is 0 */
  /* A resumed sequence (it was preempted): the resumed_len ids it generated
   * before; recompute prompt + these and emit from token resumed_len on.
   * NULL and 0 otherwise. */
  const uint32_t* resumed;
  uint32_t resumed_len;
} fairsched_work_item;

typedef struct fairsched_worker_stats {
  uint64_t assigned;
  uint64_t aborted;
  uint64_t tokens_emitted;
  uint64_t finished;
  uint64_t ring_full_waits; /* event pushes that found the ring full at first */
} fairsched_worker_stats;

FAIRSCHED_C_API void fairsched_worker_options_init(fairsched_worker_options* options);

/* Connects and attaches to options->endpoint. On success *out is a handle
 * for fairsched_worker_close. Errors: those of fairsched_connect, and
 * _INVALID_ARGUMENT (no endpoint or a bad name), _REFUSED (no such endpoint,
 * or not executor = "worker"), _UNAUTHORIZED (no [[clients]] rule lists the
 * endpoint in its `workers`), _SHUTTING_DOWN (the daemon is stopping, or
 * draining after `fairschedctl drain`: it takes no new workers until
 * `fairschedctl resume`; the attached ones keep serving). */
FAIRSCHED_C_API fairsched_error fairsched_worker_connect(const fairsched_worker_options* options,
                                                         fairsched_worker** out);
/* What the engine can take now: the daemon never assigns more than the last
 * call left room for. _DAEMON_LOST, _RING_FULL (event_timeout). */
FAIRSCHED_C_API fairsched_error fairsched_worker_set_capacity(fairsched_worker* worker,
                                                              uint32_t free_sequences,
                                                              uint64_t free_kv_tokens);
/* Copies up to max assignments and aborts into out, in the daemon's order;
 * returns how many. Never blocks. */
FAIRSCHED_C_API size_t fairsched_worker_poll(fairsched_worker* worker, fairsched_work_item* out,
                                             size_t max);
/* Blocks until fairsched_worker_poll has something or timeout_ns passes
 * (negative: forever). FAIRSCHED_ERR_TIMED_OUT, _DAEMON_LOST, _SYSTEM. */
FAIRSCHED_C_API fairsched_error fairsched_worker_wait(fairsched_worker* worker, int64_t timeout_ns);
/* A descriptor for epoll/poll, readable when fairsched_worker_poll may have
 * something. Call fairsched_worker_prepare_to_block before every blocking
 * wait on it. */
FAIRSCHED_C_API int fairsched_worker_event_fd(const fairsched_worker* worker);
/* *block = 1: block on the fd now; 0: poll first. _DAEMON_LOST. */
FAIRSCHED_C_API fairsched_error fairsched_worker_prepare_to_block(fairsched_worker* worker,
                                                                  int* block);
/* Output tokens of assignment id, in order, as generated (any count n > 0).
 * _INVALID_ARGUMENT (none), _DAEMON_LOST, _RING_FULL. Emitting more than
 * the assignment's max_output_tokens in all gets the worker dropped. */
FAIRSCHED_C_API fairsched_error fairsched_worker_emit(fairsched_worker* worker, uint64_t id,
                                                      const uint32_t* tokens, size_t n);
/* One engine step's output: tokens[i] of assignment ids[i], for i < n (an
 * id may appear more than once: its tokens in that order). One record per
 * 85 tokens instead of one each. Errors as fairsched_worker_emit. */
FAIRSCHED_C_API fairsched_error fairsched_worker_emit_step(fairsched_worker* worker,
                                                           const uint64_t* ids,
                                                           const uint32_t* tokens, size_t n);
/* Ends assignment id after output_tokens tokens in all (at least those
 * emitted; any not emitted are charged, not streamed). Every assignment ends
 * with exactly one: FAIRSCHED_STATUS_OK when done, _CANCELLED to acknowledge
 * an ABORT, _EXECUTOR_FAILED when the engine failed it, _INVALID when it can
 * never serve it. message (may be NULL; at most FAIRSCHED_MAX_PARAMS_BYTES
 * are sent) says why when status is not OK. */
FAIRSCHED_C_API fairsched_error fairsched_worker_finish(fairsched_worker* worker, uint64_t id,
                                                        fairsched_status status,
                                                        uint32_t output_tokens,
                                                        const char* message);
/* fairsched_worker_finish with the prompt's length as the engine counted it
 * (a proxy's upstream usage): input_tokens, when not 0, charges the tenant
 * the difference from the submitted count, and the request's completion
 * reports it (input_tokens). At most the endpoint's max_batch_tokens: more
 * gets the worker dropped. 0 is fairsched_worker_finish. */
FAIRSCHED_C_API fairsched_error
fairsched_worker_finish_counted(fairsched_worker* worker, uint64_t id, fairsched_status status,
                                uint32_t output_tokens, uint32_t input_tokens, const char* message);
/* Acknowledges a PREEMPT: id stopped after generating output_tokens in all,
 * every one emitted. _DAEMON_LOST, _RING_FULL. */
FAIRSCHED_C_API fairsched_error fairsched_worker_preempted(fairsched_worker* worker, uint64_t id,
                                                           uint32_t output_tokens);
/* KV events, for an endpoint with routing = "prefix" (fairsched/worker.hpp,
 * Worker::blocksStored): the engine's prefix cache stored blocks (hashes: a
 * run of one prompt's block hash chain, leading block first), removed them,
 * or was cleared (hashes NULL, n 0). From a worker's first KV event on, the
 * daemon routes by what it reports. _INVALID_ARGUMENT (an unknown op, or no
 * hashes for STORED/REMOVED), _DAEMON_LOST, _RING_FULL. */
typedef enum fairsched_cache_op {
  FAIRSCHED_CACHE_STORED = 1,
  FAIRSCHED_CACHE_REMOVED = 2,
  FAIRSCHED_CACHE_CLEARED = 3
} fairsched_cache_op;
FAIRSCHED_C_API fairsched_error fairsched_worker_cache_event(fairsched_worker* worker, int32_t op,
                                                             const uint64_t* hashes, size_t n);
/* A prompt's prefix identity (fairsched/prefix_hash.hpp): writes the hashes
 * of its first min(max_out, n_tokens / block_tokens) whole blocks to out,
 * hash i covering tokens [0, (i + 1) x block_tokens); returns how many (0
 * when block_tokens is 0 or tokens/out is NULL). */
FAIRSCHED_C_API size_t fairsched_prefix_block_hashes(const uint32_t* tokens, size_t n_tokens,
                                                     uint32_t block_tokens, uint64_t* out,
                                                     size_t max_out);
/* Nonzero while attached. */
FAIRSCHED_C_API int fairsched_worker_connected(const fairsched_worker* worker);
/* The name of the endpoint served, as the daemon described it; valid until
 * fairsched_worker_close ("" for NULL). */
FAIRSCHED_C_API const char* fairsched_worker_endpoint_name(const fairsched_worker* worker);
/* The daemon's id for this worker connection: `fairschedctl status` lists
 * the worker under it (0 for NULL). */
FAIRSCHED_C_API uint64_t fairsched_worker_id(const fairsched_worker* worker);
/* Counters since connect (relaxed). */
FAIRSCHED_C_API void fairsched_worker_get_stats(const fairsched_worker* worker,
                                                fairsched_worker_stats* out);
/* Detaches for good without freeing the handle: a fairsched_worker_wait or
 * an event waiting for room in the ring returns FAIRSCHED_ERR_NOT_CONNECTED
 * at once, and so does every later call. May be called from any thread while
 * other calls on the handle are in progress; fairsched_worker_close it once
 * they have returned. Idempotent; NULL is fine. */
FAIRSCHED_C_API void fairsched_worker_shutdown(fairsched_worker* worker);
/* Detaches and frees the handle; NULL is fine. What it still runs ends
 * EXECUTOR_FAILED at its clients, or goes back to its queue when nothing of
 * it was streamed yet and the endpoint's worker.requeue_on_loss says so. */
FAIRSCHED_C_API void fairsched_worker_close(fairsched_worker* worker);

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
