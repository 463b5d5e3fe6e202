// The parsed form of a chat template: expressions and statements, as the
// parser (parser.h) builds them and the renderer (renderer.h) walks them.
// Immutable once parsed; shared by concurrent renders.
#ifndef CASTSERVE_TEXT_JINJA_SYNTAX_AST_H_
#define CASTSERVE_TEXT_JINJA_SYNTAX_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace castserve::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items
    kDict,       // items: key, value, key, value, ...
    kGetAttr,    // items[0].name
    kGetItem,    // items[0][items[1]]
    kSlice,      // items[0][items[1]:items[2]:items[3]] (null: omitted)
    kCall,       // items[0](items[1..], keyword_names for the last ones)
    kFilter,     // items[0] | name(items[1..], keyword_names ...)
    kTest,       // items[0] is [not] name(items[1..])
    kNot,        // not items[0]
    kNegate,     // -items[0]
    kPlus,       // +items[0]
    kBinary,     // items[0] op items[1]: + - * / // % ** ~
    kAnd,        // items[0] and items[1]
    kOr,         // items[0] or items[1]
    kCompare,    // items[0] ops[0] items[1] ops[1] items[2] ...
    kCondition,  // items[1] if items[0] else items[2] (null: undefined)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  // 1 + the deepest of `items` (a leaf is 1): the evaluator's and the
  // destructor's recursion, bounded by the parser.
  int depth = 1;
  Value value;
  std::string name;  // Name, attribute, filter or test; operator of kBinary.
  std::vector<ExprPtr> items;
  // kCall, kFilter: the keyword arguments are the last
  // keyword_names.size() items.
  std::vector<std::string> keyword_names;
  std::vector<std::string> ops;  // kCompare: ==, !=, <, <=, >, >=, in, notin
  bool negated = false;          // kTest.
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kData,      // text
    kOutput,    // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if condition]: bodies[0]; else
    kSet,       // set targets = expr   (attribute: ns.attribute = expr)
    kSetBlock,  // set targets %}bodies[0]{% endset, then filters
    kMacro,     // macro name(params = defaults): bodies[0]
    kBreak,
    kContinue,
    kGeneration,  // transformers' {% generation %}: renders bodies[0]
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;                // kFor's filter.
  std::vector<ExprPtr> conditions;  // kIf.
  std::vector<Body> bodies;
  Body else_body;
  std::vector<std::string> targets;  // Names assigned or looped over.
  std::string attribute;             // kSet on a namespace: ns.attribute.
  std::vector<ExprPtr> defaults;     // kMacro: one per param (null: none).
  std::vector<ExprPtr> filters;      // kSetBlock: kFilter with null input.
};

struct Program {
  Body body;
};

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_SYNTAX_AST_H_
