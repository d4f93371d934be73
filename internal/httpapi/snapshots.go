package httpapi

import (
	"net/http"
	"strconv"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/tenant"
)

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) error {
	var req api.CheckpointRequest
	if r.ContentLength != 0 {
		if err := s.decodeJSON(w, r, &req); err != nil {
			return err
		}
	}
	sn, err := s.mgr.Checkpoint(r.Context(), r.PathValue("sandbox"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sn)
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	page, err := pageParams(q)
	if err != nil {
		return err
	}
	list, err := s.mgr.ListSnapshotsPage(r.Context(), q.Get("sandbox"), "", page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	sn, err := s.mgr.GetSnapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sn)
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	if err := s.mgr.DeleteSnapshot(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) error {
	var req api.ForkRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	res, err := s.mgr.Fork(r.Context(), r.PathValue("sandbox"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, res)
	return nil
}

func (s *Server) suspend(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.mgr.Suspend(r.Context(), r.PathValue("sandbox"), "suspended on request")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.mgr.Resume(r.Context(), r.PathValue("sandbox"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) createPool(w http.ResponseWriter, r *http.Request) error {
	var req api.CreatePoolRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	p, err := s.mgr.CreatePool(r.Context(), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, p)
	return nil
}

// listPools lists the caller's pools; with members=true each with the
// sandboxes it keeps ready, and for an admin the default pool too (whose
// members no other route shows).
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) error {
	var o sandbox.PoolListOptions
	if v := r.URL.Query().Get("members"); v != "" {
		members, err := strconv.ParseBool(v)
		if err != nil {
			return errdefs.InvalidArgument("members: %q is not a boolean", v)
		}
		o.Members = members
	}
	if p, ok := tenant.From(r.Context()); o.Members && ok && p.Admin {
		o.DefaultPool = true
	}
	pools, err := s.mgr.ListPools(r.Context(), o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.PoolList{Pools: pools})
	return nil
}

func (s *Server) deletePool(w http.ResponseWriter, r *http.Request) error {
	if err := s.mgr.DeletePool(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
