// parser.cc's Parser, shared by its two halves: statements (parser.cc)
// and expressions (parser_expressions.cc). Internal to
// //text/jinja/syntax:parser.
#ifndef CASTSERVE_TEXT_JINJA_SYNTAX_PARSER_INTERNAL_H_
#define CASTSERVE_TEXT_JINJA_SYNTAX_PARSER_INTERNAL_H_

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "text/jinja/syntax/ast.h"
#include "text/jinja/syntax/lexer.h"

namespace castserve::text::jinja::parser_internal {

using Kind = Token::Kind;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, int max_depth)
      : tokens_(tokens), max_depth_(max_depth) {}

  absl::StatusOr<std::unique_ptr<Program>> Run();

 private:
  const Token& Peek(size_t ahead = 0) const {
    size_t at = std::min(index_ + ahead, tokens_.size() - 1);
    return tokens_[at];
  }
  const Token& Next() {
    const Token& token = Peek();
    if (index_ < tokens_.size() - 1) ++index_;
    return token;
  }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kOperator && Peek(ahead).value == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kName && Peek(ahead).value == name;
  }
  absl::Status TooDeep(int line, int column) const {
    return absl::ResourceExhaustedError(
        absl::StrCat("template nests deeper than max_nesting_depth (",
                     max_depth_, ") at ", PositionText(line, column)));
  }
  absl::Status Error(const Token& at, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("template syntax error at ",
                     PositionText(at.line, at.column), ": ", what));
  }
  absl::Status Unsupported(const Token& at, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported construct ", what, " at ",
                     PositionText(at.line, at.column)));
  }
  absl::Status ExpectOp(absl::string_view op);
  absl::Status ExpectBlockEnd();
  absl::StatusOr<std::string> ExpectName();
  absl::Status Enter(const Token& at);
  void Leave() { --depth_; }
  // Sets node->depth from its items: an error past max_depth_, so that no
  // chain the parser builds by iterating (`1+1+1`, `x.a.a`, `x|f|f`,
  // `a[0][0]`) nests deeper than a recursive one could.
  absl::Status Deepen(Expr* node) const;
  absl::StatusOr<ExprPtr> Deepened(ExprPtr node) const {
    absl::Status status = Deepen(node.get());
    if (!status.ok()) return status;
    return node;
  }

  // Statements up to (not including) a `{% name` with name in `stop`;
  // sets *stopped_at to it ("" at the end of the template).
  absl::Status ParseBody(const absl::flat_hash_set<std::string>& stop,
                         Body* body, std::string* stopped_at);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement();
  absl::Status ParseIf(Stmt* stmt);
  absl::Status ParseFor(Stmt* stmt);
  absl::Status ParseSet(Stmt* stmt);
  absl::Status ParseMacro(Stmt* stmt);
  absl::Status ParseBlockBody(Body* body, absl::string_view end_name,
                              const Token& opened);
  absl::Status ParseTargets(std::vector<std::string>* targets);

  // Expressions, from the loosest binding to the tightest.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condition);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condition = true);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseBinary(int level);
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr input);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr input);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::Status ParseCallArgs(Expr* call);
  absl::StatusOr<ExprPtr> ParseNumber(const Token& token);

  ExprPtr MakeExpr(Expr::Kind kind, const Token& at) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = at.line;
    expr->column = at.column;
    return expr;
  }

  const std::vector<Token>& tokens_;
  const int max_depth_;
  size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace castserve::text::jinja::parser_internal

#endif  // CASTSERVE_TEXT_JINJA_SYNTAX_PARSER_INTERNAL_H_
