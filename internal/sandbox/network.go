package sandbox

import (
	"context"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/netsetup"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
)

// checkNetwork validates an egress policy given for a sandbox (nil: none).
func checkNetwork(n *api.NetworkPolicy, internet bool) error {
	if n == nil {
		return nil
	}
	if !internet && (len(n.AllowOut) > 0 || len(n.DenyOut) > 0) {
		return errdefs.InvalidArgument("network: a sandbox without allow_internet_access reaches nothing; allow_out and deny_out need allow_internet_access: true")
	}
	_, err := netsetup.ParsePolicy(n.AllowOut, n.DenyOut)
	return err
}

// egress is spec's egress policy for the runtime (validated when the spec
// was made; a record that no longer parses gets the default).
func egress(spec store.Spec) netsetup.Policy {
	if spec.Network == nil {
		return netsetup.Policy{}
	}
	p, _ := netsetup.ParsePolicy(spec.Network.AllowOut, spec.Network.DenyOut)
	return p
}

// Update changes a sandbox's settings: its egress policy and its idle
// timeout. A running sandbox's new policy applies before Update returns; a
// suspended one's when it resumes. A new timeout counts from now.
func (m *Manager) Update(ctx context.Context, ref string, req *api.UpdateSandboxRequest) (_ *api.Sandbox, err error) {
	sb, err := m.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	if req.TimeoutSecs != nil {
		if sb, err = m.setTimeout(ctx, sb, *req.TimeoutSecs); err != nil {
			return nil, err
		}
	}
	if req.Network == nil {
		return m.view(sb), nil
	}
	if err := checkNetwork(req.Network, sb.Spec.AllowInternetAccess); err != nil {
		return nil, err
	}
	ctx, unlock, err := m.lockOp(ctx, sb.ID, "update", lockOpts{})
	if err != nil {
		return nil, err
	}
	defer unlock()
	// A delete cancels what holds the lock: whatever error that causes,
	// the delete is the answer.
	defer func() { err = opErr(ctx, err) }()
	if sb, err = m.store.Get(ctx, sb.ID); err != nil {
		return nil, err
	}
	policy := req.Network
	if len(policy.AllowOut) == 0 && len(policy.DenyOut) == 0 {
		policy = nil
	}
	var runtimeRec []byte
	switch sb.State {
	case api.StateRunning:
		if sb.Spec.AllowInternetAccess {
			info, err := runtime.UnmarshalInfo(sb.Runtime)
			if err != nil {
				return nil, err
			}
			p, _ := netsetup.ParsePolicy(req.Network.AllowOut, req.Network.DenyOut)
			if err := m.rt.SetEgress(sb.ID, info, p); err != nil {
				return nil, opErr(ctx, err)
			}
			runtimeRec = runtime.MarshalInfo(info)
			m.mu.Lock()
			if l := m.live[sb.ID]; l != nil {
				l.info = info
			}
			m.mu.Unlock()
		}
	case api.StateSuspended:
	default:
		return nil, errdefs.FailedPrecondition("sandbox %s is %s; its network policy can change while it runs or is suspended", sb.ID, sb.State)
	}
	sb, err = m.store.Update(ctx, sb.ID, func(s *store.Sandbox) error {
		s.Spec.Network = policy
		if runtimeRec != nil {
			s.Runtime = runtimeRec
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.log.Info("sandbox network policy set", "sandbox", sb.ID, "allow_out", len(req.Network.AllowOut), "deny_out", len(req.Network.DenyOut))
	return m.view(sb), nil
}

// setTimeout gives sandbox sb a new idle timeout, counted from now.
func (m *Manager) setTimeout(ctx context.Context, sb *store.Sandbox, secs int64) (*store.Sandbox, error) {
	if secs < 1 || secs > maxTimeoutSecs {
		return nil, rangeErr("timeout_secs", secs, 1, maxTimeoutSecs)
	}
	if sb.State.Ended() {
		return nil, notRunning(sb)
	}
	now := m.now().UTC()
	sb, err := m.store.Update(ctx, sb.ID, func(s *store.Sandbox) error {
		s.Spec.TimeoutSecs = secs
		s.LastActiveAt = now
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	l := m.live[sb.ID]
	m.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		l.timeout = time.Duration(secs) * time.Second
		l.lastActive = now
		l.mu.Unlock()
	}
	return sb, nil
}
