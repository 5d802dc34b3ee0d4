package precision

import (
	"fmt"
	"strings"

	"github.com/weftml/weft/dtype"
)

// ConflictError reports two plugins claiming one exclusive role.
type ConflictError struct {
	Role string
	A, B string // the claimants' names, with what each claims
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("precision: role %s claimed by %s and %s", e.Role, e.A, e.B)
}

// composite is the plugin Compose returns. It implements no role itself:
// the role helpers find each role in its members (see role).
type composite struct {
	members []Plugin
}

func (c *composite) Name() string {
	names := make([]string, len(c.members))
	for i, m := range c.members {
		names[i] = m.Name()
	}
	return strings.Join(names, "+")
}

// Unwrap returns the members in composition order.
func (c *composite) Unwrap() []Plugin { return c.members }

// exclusiveRoles are the roles one plugin at most may hold in a composition.
// claim reports whether p holds the role and what it claims; two claims
// that agree (both cast inputs to bf16) are not a conflict when agree is set.
var exclusiveRoles = []struct {
	name  string
	claim func(p Plugin) (what string, ok bool)
	agree bool
}{
	{"loss scaling", claimOf[LossScaler](nil), false},
	{"storage", claimOf(func(s StorageOwner) dtype.DType { return s.StorageDType() }), false},
	{"compute (autocast)", claimOf[Autocaster](nil), false},
	{"optimizer state", claimOptimizerState, false},
	{"input casting", claimOf(func(c InputCaster) dtype.DType { return c.InputDType() }), true},
	{"output casting", claimOf(func(c OutputCaster) dtype.DType { return c.OutputDType() }), true},
	{"parameter gathers", commClaim[GatherQuantizer]("param_dtype", func(c CommPolicy) dtype.DType { return c.ParamDType }), false},
	{"gradient reductions", commClaim[GradReducer]("reduce_dtype", func(c CommPolicy) dtype.DType { return c.ReduceDType }), false},
}

// claimOptimizerState claims the optimizer-state role for a plugin that
// picks the moments' dtype or keeps them in low-bit codes.
func claimOptimizerState(p Plugin) (string, bool) {
	if q, ok := p.(OptimizerQuantizer); ok {
		return q.OptimizerFormat().String(), true
	}
	return claimOf(func(o OptimizerStater) dtype.DType { return o.OptimizerStateDType() })(p)
}

// claimOf builds a claim function for role R, describing the claim by the
// dtype it names (when dt is not nil).
func claimOf[R any](dt func(R) dtype.DType) func(Plugin) (string, bool) {
	return func(p Plugin) (string, bool) {
		r, ok := p.(R)
		if !ok {
			return "", false
		}
		if dt == nil {
			return "", true
		}
		return dt(r).String(), true
	}
}

// Compose returns a plugin that holds the roles of all of ps: module
// conversions run in order, forward scopes nest in order, and state is kept
// per member. Nested compositions are flattened. An exclusive role claimed
// by two members is a *ConflictError naming the role and both plugins.
func Compose(ps ...Plugin) (Plugin, error) {
	var members []Plugin
	for _, p := range ps {
		members = append(members, Members(p)...)
	}
	if len(members) == 1 {
		return members[0], nil
	}
	for _, r := range exclusiveRoles {
		var owner Plugin
		var ownerClaim string
		for _, m := range members {
			what, ok := r.claim(m)
			if !ok {
				continue
			}
			if owner != nil && !(r.agree && what == ownerClaim) {
				return nil, &ConflictError{Role: r.name, A: describe(owner, ownerClaim), B: describe(m, what)}
			}
			owner, ownerClaim = m, what
		}
	}
	return &composite{members: members}, nil
}

func describe(p Plugin, claim string) string {
	if claim == "" {
		return p.Name()
	}
	return fmt.Sprintf("%s (%s)", p.Name(), claim)
}
