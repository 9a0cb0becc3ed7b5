/* driver_broker_pump.h - the broker driver's write_stream body pump: a source evbuffer moved to an HTTP request's streamed body within a bound (adr/0030). */
#ifndef DRIVER_BROKER_PUMP_H
#define DRIVER_BROKER_PUMP_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct sbx_http_req;
struct bpump;

/*
 * Moves len bytes from src (added to by its owner over time) to http's
 * streamed body (sbx_http_request body_stream, stream_len len), only while
 * the connection's output holds less than max bytes (refilled below half):
 * the owner learns of room from src's n_deleted and reads its own client
 * no faster (backpressure). Puts evbuffer callbacks on src and on http's
 * output, removed by bpump_free (or when all len bytes went). src and http
 * must outlive the pump: free it before cancelling http or freeing src.
 * Returns the pump (it has already moved what src holds), NULL when out of
 * memory.
 */
struct bpump *bpump_new(struct evbuffer *src, uint64_t len, size_t max,
    struct sbx_http_req *http);

/* Detaches and frees p; NULL ok. */
void bpump_free(struct bpump *p);

#endif
