package ha

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// Election is what Probe reads of an election.
type Election struct {
	Candidates []string // the instances campaigning, the leader first
}

// Probe connects to the ZooKeeper ensemble (surveysync doctor), within
// timeout, and reads the election under root: who campaigns and who leads.
// A root that does not exist yet is no error (no daemon has started).
// With auth, it reads as the daemons do (their znodes are creator-only).
func Probe(ctx context.Context, servers []string, root string, auth Auth, timeout time.Duration) (Election, error) {
	var el Election
	if len(servers) == 0 {
		return el, errors.New("ha: no servers")
	}
	conn, events, err := zk.Connect(servers, max(timeout, 2*time.Second), zk.WithLogInfo(false), zk.WithLogger(discardLogger{}))
	if err != nil {
		return el, fmt.Errorf("ha: connect %s: %w", strings.Join(servers, ","), err)
	}
	defer conn.Close()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for ok := false; !ok; {
		select {
		case <-ctx.Done():
			return el, ctx.Err()
		case <-deadline.C:
			return el, fmt.Errorf("ha: no ZooKeeper session with %s within %s", strings.Join(servers, ","), timeout)
		case ev := <-events:
			ok = ev.State == zk.StateHasSession
		}
	}
	if err := auth.authenticate(conn); err != nil {
		return el, fmt.Errorf("ha: %w", err)
	}
	children, _, err := conn.Children(root)
	if errors.Is(err, zk.ErrNoNode) {
		return el, nil
	}
	if err != nil {
		return el, fmt.Errorf("ha: read %s: %w", root, auth.noAuth(err, root))
	}
	for _, ch := range candidates(children) {
		data, _, err := conn.Get(root + "/" + ch)
		if errors.Is(err, zk.ErrNoNode) {
			continue // left meanwhile
		}
		if err != nil {
			return el, fmt.Errorf("ha: read %s/%s: %w", root, ch, auth.noAuth(err, root+"/"+ch))
		}
		el.Candidates = append(el.Candidates, string(data))
	}
	return el, nil
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
