return str(type(budget).__dict__)
