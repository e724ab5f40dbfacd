/* migrations.h — the schema migrations embedded at build time from migrations/NNNN_name.sql
 * (scripts/embed-sql.sh generates the array). Only orchestrator/store.c applies them. */
#ifndef TF_MIGRATIONS_H
#define TF_MIGRATIONS_H

struct tf_migration {
	int version;      /* NNNN from the file name; PRAGMA user_version after it is applied */
	const char *name; /* file name without .sql */
	const char *sql;  /* the whole file */
};

/* In ascending version order, numbered 1..tf_migrations_count without gaps. */
extern const struct tf_migration tf_migrations[];
extern const int tf_migrations_count;

#endif
