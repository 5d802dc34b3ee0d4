package precision

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/nn"
)

// Convert runs every module's conversion: its plugin's layer replacements
// in composition order, then the cast of its own parameters to the
// plugin's storage dtype. It records in each Scope which members replaced
// the module's arithmetic. Two members replacing one Linear's arithmetic
// are a *ConflictError. Converters that report their declines
// (ConversionReporter) are held to their purpose: one that a rule brought
// in and that converts no Linear of the modules the rule matches is an
// error; one of the default plugin that converts none of the model's adds
// a warning (training goes on in the other roles' precision), and so does
// one that leaves some Linears as they were beside those it converts.
func (r *Resolution) Convert() error {
	tallies := map[memberKey]*tally{}
	var order []memberKey
	for i, s := range r.Scopes {
		var replacedBy Plugin
		for j, member := range Members(s.Plugin) {
			c, ok := member.(ModuleConverter)
			if !ok {
				continue
			}
			before := arithmeticOf(s.Module)
			if err := c.ConvertModule(s.Path, s.Module); err != nil {
				if replacedBy != nil && errors.Is(err, nn.ErrGEMMReplaced) {
					where := "module " + displayPath(s.Path)
					return &ConflictError{Role: "layer replacement", A: describe(replacedBy, where), B: describe(member, where)}
				}
				return fmt.Errorf("precision: converting %q: %w", s.Path, err)
			}
			converted := !arithmeticOf(s.Module).same(before)
			if converted {
				replacedBy = member
				r.Scopes[i].Converted = append(r.Scopes[i].Converted, member.Name())
			}
			if rep, ok := member.(ConversionReporter); ok {
				key := memberKey{rule: s.Rule, member: j}
				t := tallies[key]
				if t == nil {
					t = &tally{name: member.Name()}
					tallies[key] = t
					order = append(order, key)
				}
				t.governed = append(t.governed, displayPath(s.Path))
				if converted {
					t.converted++
				} else if why, ok := rep.Declined(s.Path); ok {
					t.declined = append(t.declined, displayPath(s.Path)+" "+why)
				}
			}
		}
		if dt, ok := StorageDType(s.Plugin); ok {
			nn.CastOwn(s.Module, dt)
		}
	}
	for _, key := range order {
		if err := r.judge(key.rule, tallies[key]); err != nil {
			return err
		}
	}
	return nil
}

// memberKey names one plugin value of a resolution: the member at index
// member of the plugin of rule (-1 for the default).
type memberKey struct{ rule, member int }

// tally is what one reporting converter did over the modules it governs.
type tally struct {
	name      string
	governed  []string // module paths
	converted int
	declined  []string // "PATH WHY"
}

// judge turns a converter's tally into an error (a rule's converter that
// converted nothing) or a warning.
func (r *Resolution) judge(rule int, t *tally) error {
	prefix := ""
	if rule >= 0 {
		prefix = fmt.Sprintf("precision rule %q: ", r.rules[rule].Pattern+"="+r.rules[rule].Spec.String())
	}
	switch {
	case t.converted == 0 && rule >= 0:
		return fmt.Errorf("%s%s converted no Linear: %s", prefix, t.name, t.why())
	case t.converted == 0:
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s converted no Linear: %s; the run goes on without it", t.name, t.why()))
	case len(t.declined) > 0:
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s%s left %d Linear(s) as they were: %s", prefix, t.name, len(t.declined), list(t.declined, "; ")))
	}
	return nil
}

// why explains a converter that converted nothing.
func (t *tally) why() string {
	if len(t.declined) > 0 {
		return list(t.declined, "; ")
	}
	return fmt.Sprintf("the modules it governs (%s) hold none", list(t.governed, ", "))
}

// list joins up to 5 items with sep and counts the rest.
func list(items []string, sep string) string {
	const most = 5
	if len(items) <= most {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s%sand %d more", strings.Join(items[:most], sep), sep, len(items)-most)
}

// arithmetic is what a layer replacement changes: a Linear's GEMM and
// weight (a quantizer takes the weight away).
type arithmetic struct {
	gemm   nn.LinearGEMM
	weight *autograd.Var
}

func arithmeticOf(m nn.Module) arithmetic {
	if l, ok := m.(*nn.Linear); ok {
		return arithmetic{gemm: l.GEMM, weight: l.Weight}
	}
	return arithmetic{}
}

// same reports whether a and b are one arithmetic; GEMMs of a type that
// cannot be compared count as the same when their types are.
func (a arithmetic) same(b arithmetic) bool {
	if a.weight != b.weight || reflect.TypeOf(a.gemm) != reflect.TypeOf(b.gemm) {
		return false
	}
	if a.gemm == nil || !reflect.TypeOf(a.gemm).Comparable() {
		return true
	}
	return a.gemm == b.gemm
}
