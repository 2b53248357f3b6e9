/* Prints docs/env.md from the one parameter table (src/core/param.c).
 * The test docs.env_md_current fails when the checked-in file is stale:
 * regenerate it with `build/tools/commgemm-env-doc > docs/env.md`. */
#include <stdio.h>

#include "core/core.h"

int main(void) {
    int count = 0;
    const cgm_param *t = cgm_param_table(&count);
    printf("# Environment variables\n\n");
    printf("Generated from the parameter table in `src/core/param.c` by `commgemm-env-doc`;\n"
           "do not edit by hand. Each variable is read once, at first use, and cached.\n"
           "A `cgm_config` field that is set wins over its variable; an unset field\n"
           "(`CGM_UNSET`, `CGM_BACKEND_DEFAULT`) falls back to the variable, then to the\n"
           "default. `COMMGEMM_DEBUG=INFO` logs every effective value and its source.\n\n");
    printf("| variable | type | default | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < count; i++)
        printf("| `%s` | %s | %s | %s |\n", t[i].name, t[i].type == CGM_PARAM_INT ? "integer" : "string",
               t[i].default_value ? t[i].default_value : "(unset)", t[i].help);
    return 0;
}
