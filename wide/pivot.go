package wide

import (
	"sort"
	"strconv"
)

// Cell is one answer cell of a response (a row of the long answers table).
type Cell struct {
	Question    int64
	Row         int64 // the matrix row; 0 when none
	AnswerIndex uint16
	ChoiceID    *int64
	ChoiceLabel string
	ColumnID    *int64
	ColumnLabel string
	OtherID     *int64
	Text        string
	Value       *int64
}

// label is a cell's label: the chosen option, or a matrix cell's column.
func (c Cell) label() string {
	if c.ChoiceLabel != "" {
		return c.ChoiceLabel
	}
	return c.ColumnLabel
}

// value is a cell of a question of unknown type, as text.
func (c Cell) value() string {
	switch {
	case c.ChoiceLabel != "":
		return c.ChoiceLabel
	case c.ColumnLabel != "":
		return c.ColumnLabel
	case c.Text != "":
		return c.Text
	case c.Value != nil:
		return strconv.FormatInt(*c.Value, 10)
	}
	return ""
}

// Pivot turns one response's answer cells into its question columns'
// values, as ClickHouse's wide views do (docs/schema.md, "Wide tables"): a
// single-valued column takes its first cell (in answer order), an array
// column the distinct values sorted by answer index, an "other" column the
// text of the question's first cell with an "other" option, a choice-id
// column the first cell's choice id (else its matrix column's id).
type Pivot struct {
	cols  []Column
	pos   map[Key]int   // answer and choice-id columns by (question, row, part); survey 0
	other map[int64]int // "other" columns by question
}

// NewPivot returns the pivot to cols (a survey's columns, in view order).
func NewPivot(cols []Column) *Pivot {
	p := &Pivot{cols: cols, pos: map[Key]int{}, other: map[int64]int{}}
	for i, c := range cols {
		if c.Part == PartOther {
			p.other[c.QuestionID] = i
			continue
		}
		p.pos[Key{Question: c.QuestionID, Row: c.RowID, Part: c.Part}] = i
	}
	return p
}

type arrayItem struct {
	idx uint16
	s   string
}

// Values sets out[i] to column i's value for a response with cells (in
// answer order); out has one element per column. Values are string, *int64
// (nil: NULL) and []string.
func (p *Pivot) Values(cells []Cell, out []any) {
	set := make([]bool, len(p.cols))
	var arrays map[int][]arrayItem
	for _, c := range cells {
		k := Key{Question: c.Question, Row: c.Row}
		if i, ok := p.pos[k]; ok {
			col := p.cols[i]
			switch {
			case IsArray(col.Kind):
				s := c.Text
				switch col.Kind {
				case KindLabels:
					s = c.label()
				case KindValues:
					s = c.value()
				}
				if arrays == nil {
					arrays = map[int][]arrayItem{}
				}
				arrays[i] = append(arrays[i], arrayItem{c.AnswerIndex, s})
			case set[i]:
			case col.Kind == KindNumber:
				set[i] = true
				if c.Value != nil {
					v := *c.Value
					out[i] = &v
				} else {
					out[i] = (*int64)(nil)
				}
			case col.Kind == KindText:
				set[i] = true
				out[i] = c.Text
			default: // KindLabel
				set[i] = true
				out[i] = c.label()
			}
		}
		k.Part = PartID
		if i, ok := p.pos[k]; ok && !set[i] {
			set[i] = true
			id := c.ChoiceID
			if id == nil {
				id = c.ColumnID
			}
			if id != nil {
				v := *id
				out[i] = &v
			} else {
				out[i] = (*int64)(nil)
			}
		}
		if c.OtherID != nil {
			if i, ok := p.other[c.Question]; ok && !set[i] {
				set[i] = true
				out[i] = c.Text
			}
		}
	}
	for i, col := range p.cols {
		if set[i] {
			continue
		}
		switch {
		case IsArray(col.Kind):
			items := arrays[i]
			sort.Slice(items, func(a, b int) bool {
				if items[a].idx != items[b].idx {
					return items[a].idx < items[b].idx
				}
				return items[a].s < items[b].s
			})
			vs := make([]string, 0, len(items))
			for j, it := range items {
				if j > 0 && it == items[j-1] {
					continue
				}
				vs = append(vs, it.s)
			}
			out[i] = vs
		case col.Kind == KindNumber || col.Kind == KindChoiceID:
			out[i] = (*int64)(nil)
		default:
			out[i] = ""
		}
	}
}
