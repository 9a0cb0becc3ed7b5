/* proxy_vmrelay.h - sbx-proxy vmrelay: the egress relay inside a vm sandbox (adr/0069, amendment "egress"). */
#ifndef SBX_PROXY_VMRELAY_H
#define SBX_PROXY_VMRELAY_H

/*
 * sbx-proxy vmrelay --port DEV [--listen IPv4:PORT] [--max-conns N]
 * (argv[0] is "vmrelay"). Listens on --listen (default 127.0.0.1:3128)
 * and carries each accepted connection, unparsed, as one connection of
 * the sbx_vmux_link.h link over the virtio-serial port DEV (/dev/vportNpM,
 * opened read-write); at most N (default 64, 1..1024) at once, the next
 * closed at accept. While no broker holds the host side of the port (its
 * read says end of file) every connection is closed, DEV is opened again
 * every 200 ms, and a client accepted meanwhile waits up to 2 s for the
 * link (then closed; at most 64 wait). Decides nothing:
 * the broker passes each connection to the sandbox's sbx-proxy. Runs until
 * SIGTERM. Returns the exit status: 0 stopped, 2 usage, 1 start-up failure.
 */
int proxy_vmrelay_main(int argc, char **argv);

#endif
