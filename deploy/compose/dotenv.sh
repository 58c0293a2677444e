# dotenv.sh: sourced by check-passwords.sh and `make up-info`, which read
# the stack's settings as docker-compose does: from the environment, else
# from the .env file next to the compose files (deploy/compose/.env).
#
# read_env_file FILE keeps FILE's FLYBALL_* assignments (VAR=value,
# export VAR=value, the value in single or double quotes or none) in
# from_file; a FILE that does not exist holds none.
#
# lookup NAME sets v to NAME's value and where to where it came from: the
# environment when set there, even to nothing, else FILE. As in compose:
# a variable set but empty in the shell wins over the file, and an unset
# or empty v gets the compose file's dev default.

declare -A from_file=()
env_file=

read_env_file() {
	env_file=$1
	[[ -n $env_file && -f $env_file ]] || return 0
	local line name value re='^[[:space:]]*(export[[:space:]]+)?(FLYBALL_[A-Z0-9_]+)[[:space:]]*=(.*)$'
	while IFS= read -r line || [[ -n $line ]]; do
		[[ $line =~ $re ]] || continue
		name=${BASH_REMATCH[2]} value=${BASH_REMATCH[3]}
		if [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]]; then value=${BASH_REMATCH[1]}; fi
		from_file[$name]=$value
	done <"$env_file"
}

lookup() {
	if [[ -v $1 ]]; then
		v=${!1} where="the environment"
	else
		v=${from_file[$1]:-} where=$env_file
	fi
}
