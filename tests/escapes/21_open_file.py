# expect: forbidden — open() a host file
return open("/etc/passwd").read()
