package classify

import "strings"

// funcClass is what calling a built-in function does.
type funcClass uint8

const (
	fnUnknown funcClass = iota // not a known built-in: Write unless declared read-only
	fnRead                     // no side effect
	fnBuffer                   // session-only side effect
	fnWrite                    // persistent or cross-session side effect
	fnLock                     // advisory/user-level lock: Write with Locks
)

// Functions with side effects common to both dialects or specific to one.
// The read lists are deliberately broad: built-in aggregates, window,
// string, math, date/time, JSON, array, network, full-text, system
// information and type-constructor functions.
var (
	pgWriteFuncs = `nextval setval txid_current pg_current_xact_id pg_notify
		pg_cancel_backend pg_terminate_backend pg_reload_conf pg_rotate_logfile
		pg_switch_wal pg_switch_xlog pg_create_restore_point pg_start_backup pg_stop_backup
		pg_backup_start pg_backup_stop pg_promote pg_wal_replay_pause pg_wal_replay_resume
		pg_create_physical_replication_slot pg_create_logical_replication_slot
		pg_drop_replication_slot pg_copy_physical_replication_slot pg_copy_logical_replication_slot
		pg_replication_slot_advance pg_replication_origin_create pg_replication_origin_drop
		pg_replication_origin_advance pg_replication_origin_session_setup
		pg_replication_origin_session_reset pg_replication_origin_xact_setup
		pg_replication_origin_xact_reset pg_logical_emit_message
		pg_logical_slot_get_changes pg_logical_slot_get_binary_changes
		pg_stat_reset pg_stat_reset_shared pg_stat_reset_single_table_counters
		pg_stat_reset_single_function_counters pg_stat_reset_slru pg_stat_reset_replication_slot
		pg_stat_reset_subscription_stats pg_stat_statements_reset pg_stat_clear_snapshot
		lo_create lo_creat lo_import lo_export lo_unlink lo_put lo_from_bytea lowrite lo_truncate lo_truncate64
		lo_open lo_close lo_lseek lo_lseek64 lo_tell lo_tell64 loread lo_get
		pg_file_write pg_file_rename pg_file_unlink pg_file_sync pg_import_system_collations
		pg_extension_config_dump pg_log_backend_memory_contexts pg_export_snapshot
		pg_set_relation_stats pg_clear_relation_stats pg_set_attribute_stats pg_clear_attribute_stats
		pg_restore_relation_stats pg_restore_attribute_stats
		dblink_exec dblink_connect dblink_connect_u dblink_disconnect dblink_send_query
		pg_prewarm pg_truncate_visibility_map brin_summarize_new_values brin_summarize_range
		brin_desummarize_range gin_clean_pending_list pg_sequence_set`
	pgLockFuncs = `pg_advisory_lock pg_advisory_lock_shared pg_advisory_unlock pg_advisory_unlock_shared
		pg_advisory_unlock_all pg_advisory_xact_lock pg_advisory_xact_lock_shared
		pg_try_advisory_lock pg_try_advisory_lock_shared pg_try_advisory_xact_lock
		pg_try_advisory_xact_lock_shared`
	pgBufferFuncs = `set_config pg_sleep_for_session`
	pgReadFuncs   = `
		count sum avg min max every bool_and bool_or bit_and bit_or bit_xor array_agg string_agg
		json_agg jsonb_agg json_object_agg jsonb_object_agg json_objectagg json_arrayagg
		json_agg_strict jsonb_agg_strict json_object_agg_strict jsonb_object_agg_strict
		json_object_agg_unique jsonb_object_agg_unique json_object_agg_unique_strict jsonb_object_agg_unique_strict
		xmlagg stddev stddev_pop stddev_samp variance var_pop var_samp corr covar_pop covar_samp
		regr_avgx regr_avgy regr_count regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy
		mode percentile_cont percentile_disc rank dense_rank percent_rank cume_dist grouping any_value range_agg range_intersect_agg
		row_number ntile lag lead first_value last_value nth_value
		coalesce nullif greatest least cast extract date_part date_trunc date_bin age now
		current_date current_time current_timestamp localtime localtimestamp
		clock_timestamp statement_timestamp transaction_timestamp timeofday to_timestamp to_date to_char to_number
		make_date make_time make_timestamp make_timestamptz make_interval justify_days justify_hours justify_interval
		isfinite timezone overlaps
		abs cbrt ceil ceiling degrees div exp factorial floor gcd lcm ln log log10 min_scale mod pi power pow
		radians round scale sign sqrt trim_scale trunc width_bucket random random_normal setseed
		acos acosd asin asind atan atand atan2 atan2d cos cosd cot cotd sin sind tan tand
		sinh cosh tanh asinh acosh atanh erf erfc gamma lgamma
		ascii bit_length btrim char_length character_length chr concat concat_ws convert convert_from convert_to
		decode encode format initcap left length lower lpad ltrim md5 normalize octet_length overlay
		parse_ident pg_client_encoding position quote_ident quote_literal quote_nullable regexp_count
		regexp_instr regexp_like regexp_match regexp_matches regexp_replace regexp_split_to_array
		regexp_split_to_table regexp_substr repeat replace reverse right rpad rtrim split_part starts_with
		string_to_array string_to_table strpos substr substring to_ascii to_bin to_hex to_oct translate trim
		unistr upper casefold sha224 sha256 sha384 sha512 crc32 crc32c get_bit get_byte set_bit set_byte bit_count
		unicode_assigned unicode_version icu_unicode_version
		array_append array_cat array_dims array_fill array_length array_lower array_ndims array_position
		array_positions array_prepend array_remove array_replace array_reverse array_sample array_shuffle
		array_sort array_to_string array_upper cardinality trim_array unnest generate_series
		generate_subscripts array_to_json row_to_json to_json to_jsonb json_build_array jsonb_build_array
		json_build_object jsonb_build_object json_object jsonb_object json_array_elements
		jsonb_array_elements json_array_elements_text jsonb_array_elements_text json_array_length
		jsonb_array_length json_each jsonb_each json_each_text jsonb_each_text json_extract_path
		jsonb_extract_path json_extract_path_text jsonb_extract_path_text json_object_keys
		jsonb_object_keys json_populate_record jsonb_populate_record json_populate_recordset
		jsonb_populate_recordset json_to_record jsonb_to_record json_to_recordset jsonb_to_recordset
		json_strip_nulls jsonb_strip_nulls jsonb_set jsonb_set_lax jsonb_insert jsonb_pretty json_typeof
		jsonb_typeof jsonb_path_exists jsonb_path_match jsonb_path_query jsonb_path_query_array
		jsonb_path_query_first jsonb_path_exists_tz jsonb_path_match_tz jsonb_path_query_tz
		jsonb_path_query_array_tz jsonb_path_query_first_tz json_scalar json_serialize json_array
		json_exists json_query json_value json_table json jsonb_populate_record_valid
		to_tsvector to_tsquery plainto_tsquery phraseto_tsquery websearch_to_tsquery ts_rank ts_rank_cd
		ts_headline setweight strip tsvector_to_array array_to_tsvector numnode querytree ts_rewrite
		ts_delete ts_filter ts_lexize ts_debug ts_parse ts_token_type ts_stat get_current_ts_config
		similarity word_similarity strict_word_similarity show_trgm levenshtein soundex difference metaphone dmetaphone
		uuid_generate_v4 uuid_generate_v1 uuid_generate_v1mc gen_random_uuid uuidv4 uuidv7 uuid_extract_timestamp uuid_extract_version
		gen_random_bytes digest hmac crypt gen_salt pgp_sym_encrypt pgp_sym_decrypt
		abbrev broadcast family host hostmask inet_merge inet_same_family masklen netmask network
		set_masklen text inet_client_addr inet_client_port inet_server_addr inet_server_port
		current_database current_catalog current_query current_role current_schema current_schemas
		current_user session_user user system_user version pg_backend_pid pg_blocking_pids
		pg_conf_load_time pg_current_logfile pg_my_temp_schema pg_is_other_temp_schema
		pg_jit_available pg_listening_channels pg_notification_queue_usage pg_postmaster_start_time
		pg_safe_snapshot_blocking_pids pg_trigger_depth has_any_column_privilege has_column_privilege
		has_database_privilege has_foreign_data_wrapper_privilege has_function_privilege
		has_language_privilege has_parameter_privilege has_schema_privilege has_sequence_privilege
		has_server_privilege has_table_privilege has_tablespace_privilege has_type_privilege
		pg_has_role row_security_active acldefault aclexplode makeaclitem pg_collation_is_visible
		pg_conversion_is_visible pg_function_is_visible pg_opclass_is_visible pg_operator_is_visible
		pg_opfamily_is_visible pg_statistics_obj_is_visible pg_table_is_visible pg_ts_config_is_visible
		pg_ts_dict_is_visible pg_ts_parser_is_visible pg_ts_template_is_visible pg_type_is_visible
		format_type pg_get_catalog_foreign_keys pg_get_constraintdef pg_get_expr pg_get_functiondef
		pg_get_function_arguments pg_get_function_identity_arguments pg_get_function_result
		pg_get_indexdef pg_get_keywords pg_get_partkeydef pg_get_ruledef pg_get_serial_sequence
		pg_get_statisticsobjdef pg_get_triggerdef pg_get_userbyid pg_get_viewdef pg_index_column_has_property
		pg_index_has_property pg_indexam_has_property pg_options_to_table pg_settings_get_flags
		pg_tablespace_databases pg_tablespace_location pg_typeof pg_input_is_valid pg_input_error_info
		collation_for to_regclass to_regcollation to_regnamespace to_regoper to_regoperator to_regproc
		to_regprocedure to_regrole to_regtype to_regtypemod pg_describe_object pg_identify_object
		pg_identify_object_as_address pg_get_object_address col_description obj_description
		shobj_description pg_current_xact_id_if_assigned pg_xact_status pg_current_snapshot
		pg_snapshot_xip pg_snapshot_xmax pg_snapshot_xmin pg_visible_in_snapshot txid_current_if_assigned
		txid_current_snapshot txid_snapshot_xip txid_snapshot_xmax txid_snapshot_xmin
		txid_visible_in_snapshot txid_status pg_xact_commit_timestamp pg_xact_commit_timestamp_origin
		pg_last_committed_xact pg_control_checkpoint pg_control_system pg_control_init pg_control_recovery
		current_setting pg_settings pg_show_all_settings pg_current_wal_lsn pg_current_wal_insert_lsn
		pg_current_wal_flush_lsn pg_walfile_name pg_walfile_name_offset pg_split_walfile_name
		pg_wal_lsn_diff pg_is_in_recovery pg_last_wal_receive_lsn pg_last_wal_replay_lsn
		pg_last_xact_replay_timestamp pg_is_wal_replay_paused pg_get_wal_replay_pause_state
		pg_last_xlog_receive_location pg_last_xlog_replay_location pg_current_xlog_location
		pg_is_in_backup pg_backup_start_time pg_column_size pg_column_compression pg_column_toast_chunk_id
		pg_database_size pg_indexes_size pg_relation_size pg_size_bytes pg_size_pretty pg_table_size
		pg_tablespace_size pg_total_relation_size pg_relation_filenode pg_relation_filepath
		pg_filenode_relation pg_ls_dir pg_ls_logdir pg_ls_waldir pg_ls_tmpdir pg_ls_archive_statusdir
		pg_read_file pg_read_binary_file pg_stat_file pg_stat_get_activity pg_stat_get_backend_idset
		pg_get_keywords pg_get_replication_slots pg_sequence_last_value pg_sequence_parameters
		pg_sleep pg_sleep_until currval lastval pg_partition_tree pg_partition_ancestors pg_partition_root
		pg_get_wal_resource_managers pg_available_extensions pg_available_extension_versions
		pg_event_trigger_ddl_commands pg_event_trigger_dropped_objects pg_event_trigger_table_rewrite_oid
		pg_event_trigger_table_rewrite_reason pg_mcv_list_items pg_get_shmem_allocations
		pg_lock_status pg_stat_get_wal_senders pg_stat_get_wal_receiver pg_get_backend_memory_contexts
		pg_stat_statements pg_buffercache_pages
		num_nulls num_nonnulls bool int int2 int4 int8 integer smallint bigint float float4 float8
		real double precision varying numeric decimal varchar char character bpchar date time timestamp timestamptz interval
		timetz bit varbit bytea uuid boolean money name oid regclass regproc regtype inet cidr macaddr
		macaddr8 point line lseg box path polygon circle tsvector tsquery xml
		area center diameter height isclosed isopen npoints pclose popen radius slope width bound_box
		diagonal
		int4range int8range numrange tsrange tstzrange daterange int4multirange int8multirange
		nummultirange tsmultirange tstzmultirange datemultirange lower_inc upper_inc lower_inf upper_inf
		isempty range_merge multirange unnest_multirange
		xmlcomment xmlconcat xmlelement xmlforest xmlpi xmlroot xmlexists xml_is_well_formed
		xml_is_well_formed_document xml_is_well_formed_content xpath xpath_exists xmlparse xmlserialize
		xmltable query_to_xml table_to_xml cursor_to_xml xmltext
		row array_length nullif pg_char_to_encoding pg_encoding_to_char pg_encoding_max_length
		to_regnamespace system bernoulli cube rollup
		st_astext st_asgeojson st_geomfromtext st_distance st_dwithin st_intersects st_contains
		st_within st_makepoint st_setsrid st_transform st_x st_y st_buffer st_area st_length
		st_geomfromgeojson st_point st_makeenvelope st_asbinary st_srid
		hstore akeys avals skeys svals each exist defined delete_key hstore_to_json
		crosstab earth_distance ll_to_earth`
	myWriteFuncs = `nextval setval master_pos_wait source_pos_wait wait_for_executed_gtid_set
		wait_until_sql_thread_after_gtids binlog_gtid_pos uuid_short load_file
		sys_exec sys_eval`
	myLockFuncs   = `get_lock release_lock release_all_locks is_free_lock is_used_lock`
	myBufferFuncs = `last_insert_id`
	myReadFuncs   = `
		count sum avg min max bit_and bit_or bit_xor group_concat json_arrayagg json_objectagg std stddev
		stddev_pop stddev_samp var_pop var_samp variance any_value grouping median percentile_cont percentile_disc
		row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
		abs acos asin atan atan2 ceil ceiling conv cos cot crc32 degrees div exp floor ln log log10 log2 mod pi
		pow power radians rand round sign sin sqrt tan truncate
		adddate addtime convert_tz curdate current_date curtime current_time current_timestamp date
		date_add date_format date_sub datediff day dayname dayofmonth dayofweek dayofyear extract
		from_days from_unixtime get_format hour last_day localtime localtimestamp makedate maketime
		microsecond minute month monthname now period_add period_diff quarter sec_to_time second
		str_to_date subdate subtime sysdate time time_format time_to_sec timediff timestamp timestampadd
		timestampdiff to_days to_seconds unix_timestamp utc_date utc_time utc_timestamp week weekday
		weekofyear year yearweek
		ascii bin bit_length char char_length character_length concat concat_ws elt export_set field
		find_in_set format from_base64 hex insert instr lcase left length like_range locate lower lpad ltrim make_set
		mid oct octet_length ord position quote regexp_instr regexp_like regexp_replace regexp_substr
		repeat replace reverse right rpad rtrim soundex space strcmp substr substring substring_index
		to_base64 trim ucase unhex upper weight_string natural_sort_key sformat chr
		cast convert coalesce greatest least if ifnull isnull nullif interval case nvl nvl2 decode decode_oracle
		json_array json_array_append json_array_insert json_contains json_contains_path json_depth
		json_extract json_insert json_keys json_length json_merge json_merge_patch json_merge_preserve
		json_object json_overlaps json_pretty json_quote json_remove json_replace json_schema_valid
		json_schema_validation_report json_search json_set json_storage_free json_storage_size json_table
		json_type json_unquote json_valid json_value json_exists json_query json_compact json_detailed
		json_loose json_normalize json_equals json_array_intersect json_object_filter_keys json_object_to_array json_key_value
		aes_decrypt aes_encrypt compress decompress md5 password random_bytes sha sha1 sha2
		statement_digest statement_digest_text uncompress uncompressed_length validate_password_strength
		encrypt des_encrypt des_decrypt encode old_password
		benchmark charset coercibility collation connection_id current_role current_user database found_rows
		icu_version roles_graphml row_count schema session_user system_user user version
		bin_to_uuid inet_aton inet_ntoa inet6_aton inet6_ntoa is_ipv4 is_ipv4_compat is_ipv4_mapped is_ipv6
		is_uuid uuid uuid_to_bin sleep default values name_const
		st_astext st_aswkt st_asbinary st_aswkb st_geomfromtext st_geomfromwkb st_distance st_distance_sphere
		st_contains st_within st_intersects st_x st_y st_srid st_area st_length st_buffer st_makeenvelope
		point linestring polygon multipoint multilinestring multipolygon geometrycollection mbrcontains
		mbrwithin mbrintersects st_geomfromgeojson st_asgeojson st_latitude st_longitude
		format_bytes format_pico_time ps_current_thread_id ps_thread_id lastval previous
		column_get column_json column_list column_exists column_check column_create column_add column_delete
		regexp_like match against soundex unix_timestamp to_char add_months months_between sys_guid
		binary char_length ord sum_distinct sum avg_distinct group_concat
		date_format master_gtid_wait inet6_aton current_user`
)

var (
	pgFuncs = buildFuncTable(pgReadFuncs, pgBufferFuncs, pgWriteFuncs, pgLockFuncs)
	myFuncs = buildFuncTable(myReadFuncs, myBufferFuncs, myWriteFuncs, myLockFuncs)
)

func buildFuncTable(read, buffer, write, lock string) map[string]funcClass {
	m := make(map[string]funcClass, 1024)
	for _, f := range strings.Fields(read) {
		m[f] = fnRead
	}
	// Later lists win: a function listed twice gets its most severe class.
	for _, f := range strings.Fields(buffer) {
		m[f] = fnBuffer
	}
	for _, f := range strings.Fields(write) {
		m[f] = fnWrite
	}
	for _, f := range strings.Fields(lock) {
		m[f] = fnLock
	}
	return m
}

// lookupFunc returns the class of the built-in function name (lower case).
// A schema-qualified name is a built-in only when qualified by pg_catalog
// (PostgreSQL).
func lookupFunc(d Dialect, name string) funcClass {
	if d == MySQL {
		if strings.IndexByte(name, '.') >= 0 {
			return fnUnknown
		}
		return myFuncs[name]
	}
	if strings.HasPrefix(name, "pg_catalog.") {
		name = name[len("pg_catalog."):]
	} else if strings.IndexByte(name, '.') >= 0 {
		return fnUnknown
	}
	return pgFuncs[name]
}
