// delayline: a TCP proxy that delays every byte by a fixed time, for
// benchmarks of network round trips over loopback.
//
//   delayline [-r] ONE_WAY_US UPSTREAM...     (UPSTREAM: IPv4 address:port)
//
// For each UPSTREAM, in order, it listens on 127.0.0.1 at a port the kernel
// picks and prints that address on a line of stdout; then a line "ready".
// Each connection accepted there is paired with a new connection to its
// UPSTREAM, and every chunk read from either side is written to the other
// side ONE_WAY_US (microseconds, fractions allowed) after it arrived: a
// request and its reply take 2 * ONE_WAY_US longer than they would
// directly, plus the proxy's own cost (two more loopback hops). Reading
// never waits for delivery, so pipelined chunks are all in flight
// together, each leaving at its own time, in the order it came. One
// thread serves every UPSTREAM.
//
// What it guarantees: no chunk leaves before ONE_WAY_US after its arrival
// (the kernel's receive timestamp, SO_TIMESTAMPNS, so that the proxy's own
// wake-up to read it is not added; or the time it was read, when the
// kernel gives no plausible stamp), and chunks leave in arrival order on
// each connection. How late they leave is measured and reported (below).
// The thread sleeps in epoll_wait, with no timeout, on a timerfd armed at
// an absolute CLOCK_MONOTONIC time: a timerfd carries no timer slack,
// unlike nanosleep or an epoll_wait timeout (about 50 us), and is not
// rounded to a millisecond as Go's timers are. What is left is the time
// the kernel (and on a virtual machine, the hypervisor) takes to wake the
// thread, about 20 us on the test machine; so the timer is armed that
// much before the chunk is due (the "advance", which tracks the 75th
// percentile of the wake-ups) and the thread spins for what is left.
// With -r it asks for SCHED_FIFO (priority 1; silently not, when not
// permitted), so that a machine busy with the benchmark itself does not
// delay the delivery: a network does not wait for the CPUs either.
//
// Control on stdin: any line makes it print one line of statistics since
// the previous one:
//   chunks=N late_p50_us=L late_p99_us=L late_max_us=L lag_mean_us=G
//   advance_us=A cpu_s=C rt=R
// how many chunks it delivered, how late past their due time they left
// (1 us buckets), how long after its arrival the average chunk was read
// (the wake-up the receive timestamp makes up for), the timer's advance,
// the process's CPU time since it started (/proc/self/schedstat), and
// whether it runs SCHED_FIFO. End of file on stdin (the parent closed the
// pipe, or died) makes it exit, so it cannot outlive whoever started it.
//
// Limits: IPv4 only; a connection closed (or failing) on either side is
// closed on both at once, dropping what was still in flight; one with
// more than 64 MiB waiting towards one side is closed.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_QUEUED (64u << 20) // bytes waiting towards one side
#define HIST_US 1000           // lateness histogram: 1 us buckets, then one overflow
#define MAX_ADVANCE 50000      // ns: the most the timer is set early (and a wake-up spins)

enum kind { LISTENER, SIDE, TIMER, CONTROL };

struct chunk {
	struct chunk *next;
	struct side *to;
	uint64_t due; // CLOCK_MONOTONIC ns
	size_t len, off;
	char data[];
};

struct conn;

struct side {
	enum kind kind; // SIDE; first, as in every struct epoll points to
	int fd;
	uint32_t events;            // registered with epoll
	struct side *peer;          // where what this side reads goes
	struct conn *conn;
	struct chunk *held, *htail; // due but not yet written (the socket was full)
	size_t queued;              // bytes on their way to this side
};

struct conn {
	struct side s[2]; // s[0] the client's, s[1] the upstream's
	int refs;         // chunks on their way, in the timeline or held
	int dead;
	struct conn *next_dead;
};

struct listener {
	enum kind kind;
	int fd;
	struct sockaddr_in upstream;
};

static int ep, tfd;
static uint64_t delay_ns;
static uint64_t armed;   // when the timer expires; 0: not armed
static uint64_t advance; // how long before a chunk is due the timer expires
static int realtime;     // running SCHED_FIFO (-r, and permitted)

static struct chunk *head, *tail; // the timeline: every chunk not yet due, oldest first
static struct conn *graveyard;    // closed connections, freed once nothing refers to them
static enum kind timer_kind = TIMER, control_kind = CONTROL;

static struct {
	uint64_t chunks, lag_sum_ns, late_max_ns;
	uint64_t hist[HIST_US + 1];
} st;

static void die(const char *what) {
	perror(what);
	exit(1);
}

static uint64_t now_ns(clockid_t c) {
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static void watch(struct side *s, uint32_t events) {
	if (s->events == events)
		return;
	struct epoll_event ev = {.events = events, .data.ptr = s};
	if (epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev) < 0)
		die("epoll_ctl");
	s->events = events;
}

static void unref(struct chunk *c) {
	c->to->queued -= c->len - c->off;
	c->to->conn->refs--;
	free(c);
}

// drop closes both sides of c; chunks still in the timeline are dropped
// when they come due, and c is freed once the last one is.
static void drop(struct conn *c) {
	if (c->dead)
		return;
	c->dead = 1;
	for (int i = 0; i < 2; i++) {
		close(c->s[i].fd);
		for (struct chunk *h = c->s[i].held, *n; h; h = n) {
			n = h->next;
			unref(h);
		}
		c->s[i].held = c->s[i].htail = NULL;
	}
	c->next_dead = graveyard;
	graveyard = c;
}

// flush writes what s holds, in order, until the socket is full; it
// watches for room while something is left.
static void flush(struct side *s) {
	while (s->held) {
		struct chunk *h = s->held;
		ssize_t n = send(s->fd, h->data + h->off, h->len - h->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		if (n < 0) {
			drop(s->conn);
			return;
		}
		h->off += n;
		s->queued -= n;
		if (h->off < h->len)
			break;
		s->held = h->next;
		if (!s->held)
			s->htail = NULL;
		unref(h);
	}
	watch(s, EPOLLIN | (s->held ? EPOLLOUT : 0));
}

static void record(uint64_t late_ns) {
	uint64_t us = late_ns / 1000;
	st.chunks++;
	st.hist[us < HIST_US ? us : HIST_US]++;
	if (late_ns > st.late_max_ns)
		st.late_max_ns = late_ns;
}

// deliver sends every chunk that is due, and arms the timer for the next.
// A chunk due within the timer's advance is waited for here, spinning:
// sleeping that short would wake too late.
static void deliver(void) {
	while (head) {
		uint64_t now = now_ns(CLOCK_MONOTONIC);
		if (head->due > now + advance)
			break;
		while (now < head->due)
			now = now_ns(CLOCK_MONOTONIC);
		struct chunk *c = head;
		head = c->next;
		if (!head)
			tail = NULL;
		c->next = NULL;
		struct side *to = c->to;
		if (to->conn->dead) {
			unref(c);
			continue;
		}
		record(now - c->due);
		if (to->htail)
			to->htail->next = c;
		else
			to->held = c;
		to->htail = c;
		flush(to);
	}
	if (head && head->due - advance != armed) {
		armed = head->due - advance;
		struct itimerspec it = {.it_value = {.tv_sec = armed / 1000000000u, .tv_nsec = armed % 1000000000u}};
		if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &it, NULL) < 0)
			die("timerfd_settime");
	}
}

// woken is called when the timer woke the thread at now. The advance
// tracks the 75th percentile of the time a wake-up takes (what the kernel,
// or the hypervisor of an idle virtual CPU, adds to the timer): up 1.5 us
// after a wake-up that came too late for its chunk, down 0.5 us after one
// in time, so that it settles where a quarter come late. An outlier moves
// it by one step only. A wake-up in time spins for what is left.
static void woken(uint64_t now) {
	if (armed && now > armed + advance)
		advance = advance + 1500 < MAX_ADVANCE ? advance + 1500 : MAX_ADVANCE;
	else if (armed && advance >= 500)
		advance -= 500;
	armed = 0;
}

// receive reads what s has into a chunk on the timeline.
static void receive(struct side *s) {
	static char buf[1 << 16];
	char cbuf[CMSG_SPACE(sizeof(struct timespec))];
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t n = recvmsg(s->fd, &msg, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		drop(s->conn);
		return;
	}
	uint64_t mono = now_ns(CLOCK_MONOTONIC), age = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
			struct timespec ts;
			memcpy(&ts, CMSG_DATA(cm), sizeof ts);
			uint64_t arrived = (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec, real = now_ns(CLOCK_REALTIME);
			if (arrived <= real && real - arrived < 1000000000u) // a plausible stamp, else the read time
				age = real - arrived;
		}
	}
	st.lag_sum_ns += age;
	struct side *to = s->peer;
	if (to->queued + n > MAX_QUEUED) {
		fprintf(stderr, "delayline: more than %u bytes waiting; closing the connection\n", MAX_QUEUED);
		drop(s->conn);
		return;
	}
	struct chunk *c = malloc(sizeof *c + n);
	if (!c)
		die("malloc");
	memcpy(c->data, buf, n);
	c->next = NULL;
	c->to = to;
	c->len = n;
	c->off = 0;
	c->due = mono - age + delay_ns;
	if (tail && c->due < tail->due) // stamps of different sockets may cross
		c->due = tail->due;
	to->queued += n;
	to->conn->refs++;
	if (tail)
		tail->next = c;
	else
		head = c;
	tail = c;
}

static void add(int fd, void *ptr) {
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ptr};
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		die("epoll_ctl");
}

static void prepare(int fd) {
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
}

static void accept_one(struct listener *l) {
	int cfd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (cfd < 0)
		return;
	int ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ufd < 0 || connect(ufd, (struct sockaddr *)&l->upstream, sizeof l->upstream) < 0) {
		perror("delayline: connecting upstream");
		close(cfd);
		if (ufd >= 0)
			close(ufd);
		return;
	}
	struct conn *c = calloc(1, sizeof *c);
	if (!c)
		die("calloc");
	if (fcntl(ufd, F_SETFL, O_NONBLOCK) < 0)
		die("fcntl");
	int fds[2] = {cfd, ufd};
	for (int i = 0; i < 2; i++) {
		struct side *s = &c->s[i];
		s->kind = SIDE;
		s->fd = fds[i];
		s->conn = c;
		s->peer = &c->s[1 - i];
		s->events = EPOLLIN;
		prepare(fds[i]);
		add(fds[i], s);
	}
}

static void report(void) {
	uint64_t p50 = 0, p99 = 0, seen = 0;
	int got50 = 0, got99 = 0;
	for (int i = 0; i <= HIST_US; i++) {
		seen += st.hist[i];
		if (!got50 && seen * 2 >= st.chunks && st.chunks) {
			p50 = i;
			got50 = 1;
		}
		if (!got99 && seen * 100 >= st.chunks * 99 && st.chunks) {
			p99 = i;
			got99 = 1;
		}
	}
	double cpu = 0; // on-CPU time: /proc/self/schedstat, in ns, else getrusage
	FILE *f = fopen("/proc/self/schedstat", "r");
	unsigned long long run_ns;
	if (f && fscanf(f, "%llu", &run_ns) == 1)
		cpu = run_ns / 1e9;
	else {
		struct rusage ru;
		getrusage(RUSAGE_SELF, &ru);
		cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	}
	if (f)
		fclose(f);
	printf("chunks=%llu late_p50_us=%llu late_p99_us=%llu late_max_us=%.1f lag_mean_us=%.1f advance_us=%.1f cpu_s=%.3f rt=%d\n",
	       (unsigned long long)st.chunks, (unsigned long long)p50, (unsigned long long)p99, st.late_max_ns / 1e3,
	       st.chunks ? st.lag_sum_ns / 1e3 / st.chunks : 0, advance / 1e3, cpu, realtime);
	fflush(stdout);
	memset(&st, 0, sizeof st);
}

static void control(void) {
	char b[256];
	ssize_t n = read(0, b, sizeof b);
	if (n <= 0)
		exit(0);
	for (ssize_t i = 0; i < n; i++)
		if (b[i] == '\n')
			report();
}

int main(int argc, char **argv) {
	int arg = 1;
	if (argc > 1 && strcmp(argv[1], "-r") == 0) {
		struct sched_param sp = {.sched_priority = 1};
		realtime = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
		arg++;
	}
	char *end = "";
	double us = arg < argc ? strtod(argv[arg], &end) : -1;
	if (argc - arg < 2 || *end || us < 0) {
		fprintf(stderr, "usage: delayline [-r] ONE_WAY_US UPSTREAM...\n");
		return 2;
	}
	delay_ns = (uint64_t)(us * 1000 + 0.5);
	signal(SIGPIPE, SIG_IGN);
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		die("epoll_create1");
	if ((tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0)
		die("timerfd_create");
	add(tfd, &timer_kind);
	add(0, &control_kind);
	for (int i = arg + 1; i < argc; i++) {
		struct listener *l = calloc(1, sizeof *l);
		char host[64];
		int port;
		if (!l)
			die("calloc");
		if (sscanf(argv[i], "%63[^:]:%d", host, &port) != 2 ||
		    inet_pton(AF_INET, host, &l->upstream.sin_addr) != 1) {
			fprintf(stderr, "delayline: bad upstream \"%s\" (want IPv4 address:port)\n", argv[i]);
			return 2;
		}
		l->kind = LISTENER;
		l->upstream.sin_family = AF_INET;
		l->upstream.sin_port = htons(port);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t alen = sizeof a;
		if ((l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
		    bind(l->fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(l->fd, 128) < 0 ||
		    getsockname(l->fd, (struct sockaddr *)&a, &alen) < 0)
			die("delayline: listening");
		add(l->fd, l);
		printf("127.0.0.1:%d\n", ntohs(a.sin_port));
	}
	printf("ready\n");
	fflush(stdout);

	struct epoll_event evs[64];
	for (;;) {
		int n = epoll_wait(ep, evs, 64, -1);
		uint64_t woke = now_ns(CLOCK_MONOTONIC);
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			enum kind *k = evs[i].data.ptr;
			switch (*k) {
			case LISTENER:
				accept_one((struct listener *)k);
				break;
			case TIMER: {
				uint64_t expirations;
				(void)!read(tfd, &expirations, sizeof expirations);
				woken(woke);
				break;
			}
			case CONTROL:
				control();
				break;
			case SIDE: {
				struct side *s = (struct side *)k;
				if (s->conn->dead)
					break;
				if (evs[i].events & EPOLLOUT)
					flush(s);
				if (!s->conn->dead && evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					receive(s);
				break;
			}
			}
		}
		deliver();
		for (struct conn **p = &graveyard; *p;) {
			struct conn *c = *p;
			if (c->refs == 0) {
				*p = c->next_dead;
				free(c);
			} else
				p = &c->next_dead;
		}
	}
}
