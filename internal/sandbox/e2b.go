package sandbox

import (
	"context"
	"crypto/subtle"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// E2BAccess returns the E2B data-plane tokens of sandbox ref (the
// context's tenant's), making them when it has none yet; template, when
// not "", is recorded as the templateID an E2B client knows it by.
func (m *Manager) E2BAccess(ctx context.Context, ref, template string) (*api.Sandbox, store.E2BAccess, error) {
	sb, err := m.lookup(ctx, ref)
	if err != nil {
		return nil, store.E2BAccess{}, err
	}
	if e := sb.Spec.E2B; e != nil && e.EnvdToken != "" && (template == "" || e.Template == template) {
		return m.view(sb), *e, nil
	}
	sb, err = m.store.Update(ctx, sb.ID, func(s *store.Sandbox) error {
		if s.Spec.E2B == nil {
			s.Spec.E2B = &store.E2BAccess{}
		}
		if s.Spec.E2B.EnvdToken == "" {
			s.Spec.E2B.EnvdToken, s.Spec.E2B.TrafficToken = newPortToken(), newPortToken()
		}
		if template != "" {
			s.Spec.E2B.Template = template
		}
		return nil
	})
	if err != nil {
		return nil, store.E2BAccess{}, err
	}
	return m.view(sb), *sb.Spec.E2B, nil
}

// E2BTemplate is the templateID an E2B client created sandbox ref with
// ("" when it was not made through E2B's API).
func (m *Manager) E2BTemplate(ctx context.Context, ref string) string {
	sb, err := m.lookup(ctx, ref)
	if err != nil || sb.Spec.E2B == nil {
		return ""
	}
	return sb.Spec.E2B.Template
}

// E2BAuthorize finds sandbox id (by id only: names are per tenant, and a
// data-plane request names no tenant) and checks token against its E2B
// tokens: the envd token, or for the code interpreter (traffic) either one.
// It returns the sandbox's tenant, or ok false for an unknown sandbox, a
// wrong token or one that never had tokens — the same answer, so that the
// data plane is no oracle of what exists.
func (m *Manager) E2BAuthorize(ctx context.Context, id, token string, traffic bool) (owner string, state api.SandboxState, ok bool) {
	sb, err := m.store.Get(tenant.Unscoped(ctx), id)
	if err != nil || sb.ID != id || sb.Spec.E2B == nil || sb.Spec.E2B.EnvdToken == "" || token == "" {
		return "", "", false
	}
	match := func(want string) bool { return subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1 }
	if match(sb.Spec.E2B.EnvdToken) || (traffic && match(sb.Spec.E2B.TrafficToken)) {
		return sb.Tenant, sb.State, true
	}
	return "", "", false
}

// E2BDefaultContext is the code context an E2B client's cell runs in when
// it names none: one per language, in E2B's working directory cwd, made on
// first use and kept with the sandbox (its kernel is a process of the
// sandbox: it survives suspend, resume and restarts like any other).
// forkbox's own default context stays as it is, in /workspace.
func (m *Manager) E2BDefaultContext(ctx context.Context, ref, language, cwd string) (string, error) {
	sb, err := m.lookup(ctx, ref)
	if err != nil {
		return "", err
	}
	if sb.Spec.E2B != nil {
		if id := sb.Spec.E2B.Contexts[language]; id != "" {
			list, err := m.ListContexts(ctx, sb.ID)
			if err != nil {
				return "", err
			}
			for _, c := range list {
				if c.ID == id {
					return id, nil
				}
			}
		}
	}
	c, err := m.CreateContext(ctx, sb.ID, &api.CreateContextRequest{Language: language, Cwd: cwd})
	if err != nil {
		return "", err
	}
	_, err = m.store.Update(ctx, sb.ID, func(s *store.Sandbox) error {
		if s.Spec.E2B == nil {
			s.Spec.E2B = &store.E2BAccess{}
		}
		if s.Spec.E2B.Contexts == nil {
			s.Spec.E2B.Contexts = map[string]string{}
		}
		s.Spec.E2B.Contexts[language] = c.ID
		return nil
	})
	return c.ID, err
}
