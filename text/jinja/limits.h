// The bounds every chat template load and render stays within. Exceeding
// one is ResourceExhausted naming the limit; nothing grows past them.
#ifndef CASTSERVE_TEXT_JINJA_LIMITS_H_
#define CASTSERVE_TEXT_JINJA_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace castserve::text::jinja {

struct Limits {
  // The template's source (real chat templates are under 20 KB).
  size_t max_template_bytes = 256 * 1024;
  // One render's output, and any one string or list a render builds
  // (bytes; a list counts 16 per item).
  size_t max_output_bytes = 4 * 1024 * 1024;
  // Loop iterations in one render, all loops together (range() included).
  int64_t max_loop_iterations = 1'000'000;
  // Nesting at parse time: of statements, and of each expression's tree
  // (`1+1+1`, `x.a.a`, `x|f|f` and `a[0][0]` chains included).
  int max_nesting_depth = 64;
  // A render's recursion: statements, expressions, loops and macro calls
  // nested in one another, all together (a macro calling itself included).
  int max_render_depth = 256;
  // Lists, dicts and namespaces nested in one another, in the context and
  // in any value a render builds or prints (ValueFromJson's default depth
  // is 128).
  int max_value_depth = 256;
  // Expression and statement evaluations in one render.
  int64_t max_steps = 20'000'000;
};

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_LIMITS_H_
