// Package ha elects one leader among the daemons of one account on
// ZooKeeper (or ClickHouse Keeper, same protocol): each daemon holds an
// ephemeral sequential znode under Options.Root, the lowest leads, the others
// watch their predecessor.
//
// Fencing: the leader's work runs under a context that is cancelled as soon
// as the daemon has not heard from ZooKeeper for FenceAfter (half the
// session timeout), whatever the client library makes of it; ZooKeeper
// expires the session — and lets another daemon lead — only a full session
// timeout after its last contact. So the old leader stops starting work
// at least SessionTimeout - FenceAfter - CheckInterval before the new one
// can start (4 s with the default 10 s). Leading reports the same lease,
// read from the monotonic clock, for per-batch checks that must hold even
// after a long pause of the whole process.
package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultSessionTimeout is ha.session_timeout's default.
const DefaultSessionTimeout = 10 * time.Second

// Options configure an Elector.
type Options struct {
	Servers        []string      // host:port of the ZooKeeper ensemble
	SessionTimeout time.Duration // default DefaultSessionTimeout
	Root           string        // znode under which the candidates are; created when missing
	Instance       string        // this daemon's name, stored in its znode
	Auth           Auth          // ZooKeeper digest authentication; none when unset
	Logger         *slog.Logger
	Registerer     prometheus.Registerer
}

// Auth is ZooKeeper digest authentication (ha.username, ha.password).
// With it, every znode surveysync creates carries a creator-only ACL (the
// digest of these credentials may do everything, nobody else anything),
// except the parents of Root it creates, which others may also read and
// create children in (other accounts share /surveysync, with credentials
// of their own). Without it, the znodes are open to every client, as
// before ZooKeeper authentication could be configured.
type Auth struct {
	Username string
	Password string // never logged nor put in errors
}

// Set reports whether authentication is configured.
func (a Auth) Set() bool { return a.Username != "" }

// String never shows the password.
func (a Auth) String() string {
	if !a.Set() {
		return "none"
	}
	return "digest " + a.Username
}

// acl is the ACL of the znodes surveysync owns: Root and the candidates.
func (a Auth) acl() []zk.ACL {
	if !a.Set() {
		return zk.WorldACL(zk.PermAll)
	}
	return zk.DigestACL(zk.PermAll, a.Username, a.Password)
}

// parentACL is the ACL of the parents of Root surveysync creates: the
// credentials may do everything, anyone may read and create children (the
// roots of other accounts), nobody else may delete, write or change it.
func (a Auth) parentACL() []zk.ACL {
	if !a.Set() {
		return zk.WorldACL(zk.PermAll)
	}
	return append(a.acl(), zk.ACL{Perms: zk.PermRead | zk.PermCreate, Scheme: "world", ID: "anyone"})
}

// authenticate adds the credentials to conn (the client sends them again
// after every reconnection, to a new session too).
func (a Auth) authenticate(conn *zk.Conn) error {
	if !a.Set() {
		return nil
	}
	if err := conn.AddAuth("digest", []byte(a.Username+":"+a.Password)); err != nil {
		return fmt.Errorf("authenticate as %s: %w", a.Username, err)
	}
	return nil
}

// NoAuth reports whether err is ZooKeeper's refusal of this client's
// credentials (or of their absence) by a znode's ACL.
func NoAuth(err error) bool { return errors.Is(err, zk.ErrNoAuth) }

// noAuth explains a ZooKeeper refusal of this daemon's credentials.
func (a Auth) noAuth(err error, node string) error {
	if !errors.Is(err, zk.ErrNoAuth) {
		return err
	}
	if a.Set() {
		return fmt.Errorf("%w: %s is protected by a ZooKeeper ACL that the credentials of ha.username %s do not match: "+
			"give every daemon of this election the same ha.username and ha.password (or set the znode's ACL with zkCli.sh setAcl)", err, node, a.Username)
	}
	return fmt.Errorf("%w: %s is protected by a ZooKeeper ACL: set ha.username and ha.password to the credentials of the other daemons", err, node)
}

// Status is what an elector knows about the election.
type Status struct {
	Instance string    `json:"instance"`         // this daemon
	Leading  bool      `json:"leading"`          // this daemon leads
	Leader   string    `json:"leader,omitempty"` // the leading instance, as last seen ("" unknown)
	Since    time.Time `json:"since,omitzero"`   // when this daemon took the lead (Leading), or first saw Leader
	Root     string    `json:"root"`
}

// Elector campaigns for leadership; see Run.
type Elector struct {
	o          Options
	fenceAfter time.Duration
	check      time.Duration
	log        *slog.Logger
	gauge      prometheus.Gauge
	changes    prometheus.Counter

	leading   atomic.Bool
	lastOK    atomic.Int64 // monotonic nanoseconds since start of the last request answered
	start     time.Time    // monotonic base of lastOK
	mu        sync.Mutex
	status    Status
	runningMu sync.Mutex

	dialer zk.Dialer // tests: a network that can be cut
}

func (o *Options) setDefaults() {
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// New checks the options and registers the metrics (the gauge reads 0 until
// the elector leads).
func New(o Options) (*Elector, error) {
	if len(o.Servers) == 0 {
		return nil, errors.New("ha: no servers")
	}
	o.setDefaults()
	if o.Root == "" || !strings.HasPrefix(o.Root, "/") || (len(o.Root) > 1 && strings.HasSuffix(o.Root, "/")) || o.Root == "/" {
		return nil, fmt.Errorf("ha: root %q must be an absolute znode path such as /surveysync/account", o.Root)
	}
	if o.Instance == "" {
		return nil, errors.New("ha: no instance name")
	}
	if strings.Contains(o.Auth.Username, ":") || (o.Auth.Username == "") != (o.Auth.Password == "") {
		return nil, errors.New("ha: auth: want a user name without ':' and a password, both or neither")
	}
	e := &Elector{
		o:          o,
		fenceAfter: o.SessionTimeout / 2,
		check:      max(o.SessionTimeout/10, 10*time.Millisecond),
		log:        o.Logger,
		start:      time.Now(),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_ha_leader",
			Help: "1 while this instance leads (runs the poller, reconcile, feeds and the file copier), else 0.",
		}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_ha_leader_changes_total",
			Help: "Times this instance took the lead; summed over instances, the leader changes.",
		}),
		status: Status{Instance: o.Instance, Root: o.Root},
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(e.gauge, e.changes)
	}
	return e, nil
}

// FenceAfter is how long after its last answer from ZooKeeper the leader
// stops leading.
func (e *Elector) FenceAfter() time.Duration { return e.fenceAfter }

// Leading reports whether this daemon leads now: it won the election and
// heard from ZooKeeper less than FenceAfter ago.
func (e *Elector) Leading() bool {
	return e.leading.Load() && e.sinceOK() < e.fenceAfter
}

// Status returns what the elector knows now.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.status
	s.Leading = e.Leading()
	return s
}

func (e *Elector) sinceOK() time.Duration {
	return time.Since(e.start) - time.Duration(e.lastOK.Load())
}

func (e *Elector) contact(at time.Time) {
	v := int64(at.Sub(e.start))
	for {
		old := e.lastOK.Load()
		if v <= old || e.lastOK.CompareAndSwap(old, v) {
			return
		}
	}
}

func (e *Elector) setLeader(leader string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.status.Leader != leader {
		e.status.Leader, e.status.Since = leader, time.Now().UTC()
	}
}

// zkLogger sends the client library's messages to slog at debug level.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "zookeeper")
}

// Run campaigns until ctx ends. Each time this daemon gains the lead, it
// calls lead with a context that ends when the lead is lost (or ctx ends)
// and waits for lead to return before campaigning again; lead must return
// soon after its context ends. Connection losses and session expiry are
// handled in-process: the daemon steps down and campaigns again once
// ZooKeeper answers. Run returns nil when ctx ends; it never gives up.
func (e *Elector) Run(ctx context.Context, lead func(context.Context)) error {
	if !e.runningMu.TryLock() {
		return errors.New("ha: Run called twice")
	}
	defer e.runningMu.Unlock()
	dialer := e.dialer
	if dialer == nil {
		dialer = net.DialTimeout
	}
	conn, events, err := zk.Connect(e.o.Servers, e.o.SessionTimeout,
		zk.WithLogger(zkLogger{e.log}), zk.WithLogInfo(false), zk.WithDialer(dialer))
	if err != nil {
		return fmt.Errorf("ha: %w", err)
	}
	// The session's state, as the events tell it; the campaign wakes on
	// every change.
	var (
		stateMu sync.Mutex
		state   = zk.StateDisconnected
		expired bool
	)
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		for ev := range events { // closed after conn.Close
			if ev.Type != zk.EventSession {
				continue
			}
			stateMu.Lock()
			state = ev.State
			if ev.State == zk.StateExpired {
				expired = true
			}
			stateMu.Unlock()
			if ev.State == zk.StateHasSession {
				e.contact(time.Now())
			}
			e.log.Debug("ha: zookeeper session event", "state", ev.State.String(), "server", ev.Server)
			poke()
		}
	}()
	defer func() {
		conn.Close()
		<-evDone
	}()

	c := &campaign{e: e, conn: conn, wake: wake}
	for ctx.Err() == nil {
		stateMu.Lock()
		st, exp := state, expired
		expired = false
		stateMu.Unlock()
		if exp {
			c.node = "" // the session's ephemeral znode is gone
		}
		if st != zk.StateHasSession {
			select {
			case <-ctx.Done():
			case <-wake:
			case <-time.After(e.check):
			}
			continue
		}
		if err := c.round(ctx, lead); err != nil && ctx.Err() == nil {
			e.log.Warn("ha: election round failed; trying again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(min(time.Second, e.o.SessionTimeout/4)):
			}
		}
	}
	if c.node != "" {
		// Leave at once (no wait for the session to expire): the next
		// daemon leads without delay. Best effort.
		_ = conn.Delete(c.node, -1)
	}
	return nil
}

// campaign is Run's state between rounds.
type campaign struct {
	e      *Elector
	conn   *zk.Conn
	wake   chan struct{}
	node   string // our znode (full path), "" before it is created
	authed bool   // the credentials were added to conn
	owned  bool   // Root and its parents were created, their ACLs checked
}

const nodePrefix = "n_"

// round makes sure our znode exists, then either leads until the lead is
// lost, or waits until the predecessor's znode changes.
func (c *campaign) round(ctx context.Context, lead func(context.Context)) error {
	e := c.e
	t0 := time.Now()
	if !c.authed {
		if err := e.o.Auth.authenticate(c.conn); err != nil {
			return err
		}
		c.authed = true
	}
	if !c.owned {
		if err := c.own(); err != nil {
			return err
		}
		c.owned = true
	} else if err := ensurePath(c.conn, e.o.Root, e.o.Auth); err != nil {
		return fmt.Errorf("create %s: %w", e.o.Root, e.o.Auth.noAuth(err, e.o.Root))
	}
	e.contact(t0)
	if c.node != "" {
		ok, _, err := c.conn.Exists(c.node)
		if err != nil {
			return err
		}
		if !ok {
			c.node = ""
		}
	}
	if c.node == "" {
		p, err := c.conn.CreateProtectedEphemeralSequential(e.o.Root+"/"+nodePrefix, []byte(e.o.Instance), e.o.Auth.acl())
		if err != nil {
			return fmt.Errorf("create candidate znode: %w", e.o.Auth.noAuth(err, e.o.Root))
		}
		c.node = p
		e.log.Info("ha: candidate", "znode", p, "instance", e.o.Instance)
	}
	t0 = time.Now()
	children, _, err := c.conn.Children(e.o.Root)
	if err != nil {
		return e.o.Auth.noAuth(err, e.o.Root)
	}
	e.contact(t0)
	children = candidates(children)
	me := path.Base(c.node)
	i := slices.Index(children, me)
	if i < 0 {
		c.node = "" // gone (session replaced): create again
		return nil
	}
	if i == 0 {
		return c.lead(ctx, lead)
	}
	// Follow: watch the predecessor.
	if data, _, err := c.conn.Get(e.o.Root + "/" + children[0]); err == nil {
		e.setLeader(string(data))
	}
	prev := e.o.Root + "/" + children[i-1]
	ok, _, ch, err := c.conn.ExistsW(prev)
	if err != nil {
		return err
	}
	if !ok {
		return nil // gone meanwhile: look again
	}
	e.log.Debug("ha: following", "watch", prev)
	select {
	case <-ctx.Done():
	case <-ch:
	case <-c.wake: // a session event: the loop looks at the state
	}
	return nil
}

// lead runs lead until ctx ends, the znode goes, or the lease lapses.
func (c *campaign) lead(ctx context.Context, lead func(context.Context)) error {
	e := c.e
	e.setLeader(e.o.Instance)
	e.leading.Store(true)
	e.gauge.Set(1)
	e.changes.Inc()
	e.log.Info("ha: leading", "instance", e.o.Instance, "znode", c.node)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(lctx)
	}()
	// Keep the lease: an answer from ZooKeeper at least every check.
	pinged := make(chan error, 1)
	ping := func() {
		go func() {
			t0 := time.Now()
			ok, _, err := c.conn.Exists(c.node)
			if err == nil && !ok {
				err = errors.New("our znode is gone")
			}
			if err == nil {
				e.contact(t0)
			}
			pinged <- err
		}()
	}
	inflight := true
	ping()
	tick := time.NewTicker(e.check)
	defer tick.Stop()
	var why string
	for why == "" {
		select {
		case <-ctx.Done():
			why = "stopping"
		case <-c.wake:
			// a session event: disconnected or expired ends the lead at
			// once; the lease covers the rest.
			if c.conn.State() != zk.StateHasSession {
				why = "connection to zookeeper lost (" + c.conn.State().String() + ")"
			}
		case err := <-pinged:
			inflight = false
			if err != nil && !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrClosing) {
				why = err.Error()
			}
		case <-tick.C:
			if !inflight {
				inflight = true
				ping()
			}
		}
		if why == "" && e.sinceOK() >= e.fenceAfter {
			why = fmt.Sprintf("no answer from zookeeper for %s", e.sinceOK().Round(time.Millisecond))
		}
	}
	e.leading.Store(false)
	cancel()
	<-done
	e.gauge.Set(0)
	if inflight {
		<-pinged //nolint:errcheck // its error was handled by the ping goroutine, which is owned here; requests end when the connection does
	}
	if why != "stopping" {
		e.log.Warn("ha: stepped down", "instance", e.o.Instance, "reason", why)
	} else {
		e.log.Info("ha: stepped down", "instance", e.o.Instance, "reason", why)
	}
	e.setLeader("")
	return nil
}

// candidates returns the candidate znodes ordered by sequence number.
func candidates(children []string) []string {
	out := children[:0]
	for _, ch := range children {
		if strings.Contains(ch, nodePrefix) && len(ch) > 10 {
			out = append(out, ch)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
	return out
}

// ensurePath creates p and its missing parents (persistent znodes), p
// with auth's ACL, the parents with its parent ACL.
func ensurePath(conn *zk.Conn, p string, auth Auth) error {
	ok, _, err := conn.Exists(p)
	if err != nil || ok {
		return err
	}
	cur := ""
	for _, part := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		cur += "/" + part
		acl := auth.parentACL()
		if cur == p {
			acl = auth.acl()
		}
		if _, err := conn.Create(cur, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// own creates Root (with its parents) and, with credentials, closes what
// an older surveysync (or a daemon without ha.username) left open: Root
// had an ACL that let every client write and delete it. Root gets the
// creator-only ACL; a parent still open to every client is named in a
// warning and left as it is (other accounts, with credentials of their
// own, may share it: the operator sets its ACL).
func (c *campaign) own() error {
	e := c.e
	auth, root := e.o.Auth, e.o.Root
	if err := ensurePath(c.conn, root, auth); err != nil {
		return fmt.Errorf("create %s: %w", root, auth.noAuth(err, root))
	}
	if !auth.Set() {
		return nil
	}
	acl, stat, err := c.conn.GetACL(root)
	if err != nil {
		return fmt.Errorf("read the ACL of %s: %w", root, auth.noAuth(err, root))
	}
	if worldOpen(acl) {
		if _, err := c.conn.SetACL(root, auth.acl(), stat.Aversion); err != nil {
			return fmt.Errorf("restrict the ACL of %s (open to every client): %w", root, auth.noAuth(err, root))
		}
		e.log.Info("ha: the election's znode was open to every client (an older surveysync created it); its ACL is now restricted to ha.username",
			"znode", root, "username", auth.Username)
	}
	for p := path.Dir(root); p != "/"; p = path.Dir(p) {
		acl, _, err := c.conn.GetACL(p)
		if err != nil || !worldOpen(acl) {
			continue // unreadable: not ours to judge
		}
		e.log.Warn("ha: a parent of the election's znode is open to every client, who may delete or replace the election while no daemon runs; restrict it (docs/operations.md, \"ZooKeeper authentication\")",
			"znode", p, "fix", "in zkCli.sh: addauth digest "+auth.Username+":<password>, then setAcl "+p+" auth::cdrwa,world:anyone:cr")
	}
	return nil
}

// worldOpen reports whether acl lets any client write, delete or change
// the ACL (more than read and create children).
func worldOpen(acl []zk.ACL) bool {
	for _, a := range acl {
		if a.Scheme == "world" && a.ID == "anyone" && a.Perms&^(zk.PermRead|zk.PermCreate) != 0 {
			return true
		}
	}
	return false
}
